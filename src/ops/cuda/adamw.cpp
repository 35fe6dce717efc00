// The CUDA AdamW (fsdp/ops/adamw.h) registered into adamw_stub: forms the per-step
// scalars on the host exactly as the CPU backend does and launches the fused kernel.
#include "adamw.cuh"

#include <cmath>

#include "fsdp/ops/adamw.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void adamw_cuda(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWHyper& h, double grad_scale) {
  if (param.numel() == 0) return;
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  const cuda::AdamWScalars s{1.0 - h.lr * h.weight_decay, h.lr / bc1, std::sqrt(bc2), h.beta1, h.beta2, h.eps,
                             grad_scale};
  cuda::DeviceGuard guard(param.device().index);
  cuda::launch_adamw(param.dtype(), param.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(),
                     param.numel(), s, cuda::stream_of(param));
}

}  // namespace

FSDP_REGISTER_DISPATCH(adamw_stub, DeviceType::CUDA, &adamw_cuda);

}  // namespace fsdp
