// Front end of AdamW: validates the four state tensors and the hyper-parameters once for
// all backends, then dispatches on the device. Hyper-parameter ranges follow
// torch.optim.AdamW's own checks, so a config PyTorch rejects is rejected here too.
#include "fsdp/ops/adamw.h"

#include <cmath>

namespace fsdp {

FSDP_DEFINE_DISPATCH(adamw_stub);

namespace {

void check_state(const Tensor& t, const Tensor& param, const char* what) {
  check_same_dtype(t, param, what, "param");
  check_contiguous(t, what);
  FSDP_CHECK(t.numel() == param.numel(), "{} must have as many elements as param ({}), got {}", what,
             param.numel(), t.str());
  check_same_device(t, param, what, "param");
}

}  // namespace

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWHyper& h, double grad_scale) {
  check_defined(param, "param");
  FSDP_CHECK(param.dtype() == DType::F32 || param.dtype() == DType::F64,
             "param must be float32 (float64 for tests), got {}", param.str());
  check_contiguous(param, "param");
  check_state(grad, param, "grad");
  check_state(exp_avg, param, "exp_avg");
  check_state(exp_avg_sq, param, "exp_avg_sq");
  FSDP_CHECK(std::isfinite(h.lr) && h.lr >= 0, "AdamW lr must be finite and >= 0, got {}", h.lr);
  FSDP_CHECK(h.beta1 >= 0 && h.beta1 < 1, "AdamW beta1 must be in [0, 1), got {}", h.beta1);
  FSDP_CHECK(h.beta2 >= 0 && h.beta2 < 1, "AdamW beta2 must be in [0, 1), got {}", h.beta2);
  FSDP_CHECK(std::isfinite(h.eps) && h.eps >= 0, "AdamW eps must be finite and >= 0, got {}", h.eps);
  FSDP_CHECK(std::isfinite(h.weight_decay) && h.weight_decay >= 0, "AdamW weight_decay must be finite and >= 0, got {}",
             h.weight_decay);
  FSDP_CHECK(h.step >= 1, "AdamW step is 1-based, got {}", h.step);
  FSDP_CHECK(std::isfinite(grad_scale), "AdamW grad_scale must be finite, got {}", grad_scale);
  adamw_stub(param.device(), param, grad, exp_avg, exp_avg_sq, h, grad_scale);
}

}  // namespace fsdp
