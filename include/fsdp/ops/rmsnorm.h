// RMSNorm as Llama uses it (Hugging Face LlamaRMSNorm):
//   rstd[n] = 1 / sqrt(mean_c(x[n,c]^2) + eps),   y[n,c] = x[n,c] * rstd[n] * w[c]
// x, y, dy, dx: [N, C] packed rows, same float dtype; w, dw: [C] same dtype;
// rstd: [N] float32 (float64 when x is float64), saved by forward for backward.
// Backward: dx = rstd * (dy*w - x * rstd^2 * mean_c(dy*w*x)); with accumulate_dx the
// result is added to dx (the residual stream's gradient) instead of overwriting it.
// dw is accumulated (dw += sum_n dy*x*rstd), summed over rows in fixed-size blocks in a
// fixed order so the bits do not depend on the thread count; an undefined dw (a frozen
// weight, LoRA's base) skips it.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, double eps);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw, bool accumulate_dx);

using rmsnorm_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double);
using rmsnorm_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, bool);
FSDP_DECLARE_DISPATCH(rmsnorm_forward_fn, rmsnorm_forward_stub);
FSDP_DECLARE_DISPATCH(rmsnorm_backward_fn, rmsnorm_backward_stub);

}  // namespace fsdp
