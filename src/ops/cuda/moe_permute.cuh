// Launchers of the MoE token-permutation kernels (moe_permute.cu), called by
// moe_permute.cpp. Shapes as fsdp/ops/moe_permute.h; data rows have their own strides.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool moe_permute_supports(DType t);  // float32, float64, bfloat16, float16
// Expert ids outside [0, e) are left out of every group, so offsets[e] < pairs: the
// caller (the model) checks offsets[e] == pairs on the host.
void launch_moe_permute_plan(const int32_t* expert, int64_t pairs, int64_t e, int32_t* order, int32_t* slot,
                             int32_t* offsets, cudaStream_t stream);
void launch_moe_gather_rows(DType t, RowsView x, const int32_t* order, int64_t k, RowsView xs, int64_t rows,
                            int64_t c, cudaStream_t stream);
void launch_moe_gather_rows_backward(DType t, RowsView dxs, const int32_t* slot, int64_t k, RowsView dx, int64_t n,
                                     int64_t c, bool accumulate, cudaStream_t stream);
void launch_moe_combine(DType t, RowsView ys, const int32_t* slot, const void* weight, const void* residual,
                        int64_t residual_stride, RowsView out, int64_t n, int64_t k, int64_t c, cudaStream_t stream);
void launch_moe_combine_backward(DType t, RowsView dout, RowsView ys, const int32_t* slot, const void* weight,
                                 RowsView dys, void* dweight, int64_t n, int64_t k, int64_t c, cudaStream_t stream);

}  // namespace fsdp::cuda
