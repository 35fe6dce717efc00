// General matrix multiply, the one GEMM entry point of the op set:
//   c = alpha * op(a) @ op(b) + beta * c,   op(x) = x or x^T.
// a, b, c are 2-D with packed rows (stride(1) == 1, any row stride >= row length), so
// views into fused buffers (qkv, gate|up) need no copies. dtypes: float32, float64 (CPU
// reference and finite-difference tests). beta == 0 overwrites c even if it holds NaN.
// A linear layer y = x @ W^T (W stored as [out, in], the Hugging Face layout) is
//   forward:  matmul(x, W, y, false, true)
//   backward: matmul(dy, W, dx, false, false);  matmul(dy, x, dW, true, false, 1, 1)  (dW +=)
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, double alpha = 1.0,
            double beta = 0.0);

using matmul_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, bool, bool, double, double);
FSDP_DECLARE_DISPATCH(matmul_fn, matmul_stub);

}  // namespace fsdp
