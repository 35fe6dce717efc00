// Launchers of the whole-tensor kernels (elementwise.cu), called by the dispatch
// functions in elementwise.cpp. Raw pointers and counts only: no Tensor, no fmt, so nvcc
// compiles the .cu side. Each enqueues on `stream` and returns; sum_squares waits for
// its result. n > 0 (the callers skip empty tensors).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

bool elementwise_supports(DType t);  // float32, float64, bfloat16, float16

void launch_add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream);
void launch_scale(DType t, void* x, double alpha, int64_t n, cudaStream_t stream);
// Every element := the element_size-byte pattern (the value as the dtype stores it).
void launch_fill(size_t element_size, void* x, uint64_t pattern, int64_t n, cudaStream_t stream);
void launch_cast(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, cudaStream_t stream);
// Sum of squares in double; waits for the stream. Deterministic: see sum_squares_kernel.
double sum_squares(DType t, const void* x, int64_t n, cudaStream_t stream);

}  // namespace fsdp::cuda
