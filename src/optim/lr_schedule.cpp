#include "fsdp/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fsdp::optim {

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps) return peak_lr * double(step) / double(warmup_steps);
  if (decay == LrDecay::Constant) return peak_lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double p = std::clamp(double(step - warmup_steps) / double(span), 0.0, 1.0);
  if (decay == LrDecay::Linear) return peak_lr - (peak_lr - min_lr) * p;
  return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace fsdp::optim
