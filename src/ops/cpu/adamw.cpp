// CPU AdamW over one contiguous run of parameters (torch.optim.AdamW semantics):
//
//   g  = grad * grad_scale
//   p  = p * (1 - lr * weight_decay)                  decoupled decay, before the moments
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p  = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),   bc_i = 1 - beta_i^step
//
// The per-step scalars are formed in double once and rounded to T, as PyTorch forms them
// on the host; the element loop is then pure T arithmetic, which vectorises and runs at
// memory speed. The denominator is sqrt(v) / sqrt(bc2) + eps, not sqrt(v / bc2) + eps,
// because that is where PyTorch adds eps (it matters when v is tiny).
#include <cmath>
#include <cstdint>

#include "unsupported.h"
#include "fsdp/ops/adamw.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelWork = 1 << 15;

template <typename T>
void adamw_impl(const Tensor& param_t, const Tensor& grad_t, const Tensor& m_t, const Tensor& v_t,
                const AdamWHyper& h, double grad_scale) {
  const int64_t n = param_t.numel();
  T* p = param_t.data<T>();
  const T* grad = grad_t.data<T>();
  T* m = m_t.data<T>();
  T* v = v_t.data<T>();
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  const T decay = T(1.0 - h.lr * h.weight_decay);
  const T step_size = T(h.lr / bc1);
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T b1 = T(h.beta1), one_minus_b1 = T(1.0 - h.beta1);
  const T b2 = T(h.beta2), one_minus_b2 = T(1.0 - h.beta2);
  const T eps = T(h.eps), gs = T(grad_scale);
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + one_minus_b1 * g;
    const T vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

void adamw_cpu(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const AdamWHyper& h, double grad_scale) {
  switch (param.dtype()) {
    case DType::F32: return adamw_impl<float>(param, grad, exp_avg, exp_avg_sq, h, grad_scale);
    case DType::F64: return adamw_impl<double>(param, grad, exp_avg, exp_avg_sq, h, grad_scale);
    default: cpu::unsupported("adamw_update", param.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(adamw_stub, DeviceType::CPU, &adamw_cpu);

}  // namespace fsdp
