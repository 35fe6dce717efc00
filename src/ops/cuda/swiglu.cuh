// Launchers of the SwiGLU kernels (swiglu.cu), called by swiglu.cpp. Every operand is
// [n, f] with packed rows and its own row stride.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool swiglu_supports(DType t);  // float32, float64, bfloat16, float16
void launch_swiglu_forward(DType t, RowsView gate, RowsView up, RowsView out, int64_t n, int64_t f,
                           cudaStream_t stream);
void launch_swiglu_backward(DType t, RowsView dout, RowsView gate, RowsView up, RowsView dgate, RowsView dup,
                            int64_t n, int64_t f, cudaStream_t stream);

}  // namespace fsdp::cuda
