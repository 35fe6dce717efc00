#include "fsdp/optim/optimizer.h"

#include <algorithm>

namespace fsdp::optim {

void adamw_step_range(const std::vector<DecaySegment>& segments, int64_t begin, const Tensor& param,
                      const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWConfig& cfg,
                      double lr, int64_t step, double grad_scale) {
  const int64_t end = begin + param.numel();
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg.beta1;
  h.beta2 = cfg.beta2;
  h.eps = cfg.eps;
  h.step = step;
  for (const DecaySegment& s : segments) {
    const int64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    if (lo >= hi) continue;
    h.weight_decay = s.decay ? cfg.weight_decay : 0.0;
    const int64_t off = lo - begin, n = hi - lo;
    adamw_update(param.narrow(0, off, n), grad.narrow(0, off, n), exp_avg.narrow(0, off, n),
                 exp_avg_sq.narrow(0, off, n), h, grad_scale);
  }
  // Elements past the last segment are FSDP padding: never updated, stay zero.
}

double clip_factor(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

}  // namespace fsdp::optim
