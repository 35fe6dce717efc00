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

// Vocabulary-parallel halves (cross_entropy_shard_stats / _finish in
// fsdp/ops/cross_entropy.h): logits [n, v] are the vocabulary rows [begin, begin + v) of
// `vocab`. stats: [n, 3] float64. A target outside [0, vocab) that is not ignore_index is
// recorded in `errors` and its row's statistics are an ignored row's.
void launch_cross_entropy_shard_stats(DType t, DType target_t, RowsView logits, const void* targets, double* stats,
                                      int64_t n, int64_t v, int64_t begin, int64_t vocab, int64_t ignore_index,
                                      DeviceErrorRecord* errors, cudaStream_t stream);
// all_stats: [ranks, n, 3] float64; losses as launch_cross_entropy's; dlogits.data ==
// nullptr: forward only.
void launch_cross_entropy_shard_finish(DType t, DType target_t, RowsView logits, const void* targets,
                                       const double* all_stats, int64_t ranks, void* losses, RowsView dlogits,
                                       int64_t n, int64_t v, double grad_scale, int64_t begin, int64_t ignore_index,
                                       cudaStream_t stream);

}  // namespace fsdp::cuda
