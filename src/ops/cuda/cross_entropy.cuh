// Launchers of the fused softmax cross-entropy kernels (cross_entropy.cu), called by
// cross_entropy.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool cross_entropy_supports(DType t);  // float32, float64, bfloat16, float16

// The first row whose target is neither ignore_index nor in [0, v), and that target; row
// -1 when all are valid. Waits for the stream.
struct BadTarget {
  int64_t row;
  int64_t target;
};
BadTarget find_bad_target(DType target_t, const void* targets, int64_t n, int64_t v, int64_t ignore_index,
                          cudaStream_t stream);

// dlogits.data == nullptr: forward only. losses: float32, or float64 for float64 logits.
void launch_cross_entropy(DType t, DType target_t, RowsView logits, const void* targets, void* losses,
                          RowsView dlogits, int64_t n, int64_t v, double grad_scale, int64_t ignore_index,
                          cudaStream_t stream);

}  // namespace fsdp::cuda
