// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW semantics) over one contiguous
// run of parameters, e.g. a flat FSDP shard or a segment of it:
//   g  = grad * grad_scale                          (grad_scale carries grad-norm clipping)
//   p -= lr * weight_decay * p                      (decoupled decay, before the moments)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// t is the 1-based step count. param, exp_avg, exp_avg_sq: float32 master state (float64
// allowed for tests); grad: same dtype as param. All contiguous, same numel.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based, after increment (as PyTorch's state['step'])
};

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWHyper& hyper, double grad_scale = 1.0);

using adamw_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&, double);
FSDP_DECLARE_DISPATCH(adamw_fn, adamw_stub);

}  // namespace fsdp
