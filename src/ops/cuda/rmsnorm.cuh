// Launchers of the RMSNorm kernels (rmsnorm.cu), called by rmsnorm.cpp. Rows are packed
// with their own row strides (in elements); rstd is float32, or float64 for float64 x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool rmsnorm_supports(DType t);  // float32, float64, bfloat16, float16

void launch_rmsnorm_forward(DType t, RowsView x, const void* w, RowsView y, void* rstd, int64_t n, int64_t c,
                            double eps, cudaStream_t stream);
void launch_rmsnorm_backward(DType t, RowsView dy, RowsView x, const void* w, const void* rstd, RowsView dx, void* dw,
                             int64_t n, int64_t c, bool accumulate_dx, cudaStream_t stream);

}  // namespace fsdp::cuda
