// Launchers of the fused softmax cross-entropy kernels (cross_entropy.cu), called by
// cross_entropy.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool cross_entropy_supports(DType t);  // float32, float64, bfloat16, float16

// dlogits.data == nullptr: forward only. losses: float32, or float64 for float64 logits.
// A target outside [0, v) that is not ignore_index is recorded in `errors` (Note [Device
// error record] in fsdp/core/cuda.h) and its row treated as ignored.
void launch_cross_entropy(DType t, DType target_t, RowsView logits, const void* targets, void* losses,
                          RowsView dlogits, int64_t n, int64_t v, double grad_scale, int64_t ignore_index,
                          DeviceErrorRecord* errors, cudaStream_t stream);

}  // namespace fsdp::cuda
