// Launcher of the dropout mask kernel (dropout.cu), called by dropout.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool dropout_supports(DType t);  // float32, float64, bfloat16, float16
// dst (+)= mask * src * scale over [n, c], rows numbered from row0 and columns from col0
// (fsdp/ops/dropout.h's keep rule).
void launch_dropout(DType t, RowsView src, RowsView dst, int64_t n, int64_t c, uint64_t key, int64_t row0,
                    int64_t col0, uint64_t threshold, double scale, bool accumulate, cudaStream_t stream);

}  // namespace fsdp::cuda
