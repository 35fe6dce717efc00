// Learning-rate schedule: linear warm-up, then cosine / linear decay to a floor, or
// constant. Steps are numbered 1..total_steps, as the step log prints them:
//   step <= warmup:  lr = peak * step / warmup
//   otherwise, with p = (step - warmup) / (total - warmup) in (0, 1]:
//     cosine:   lr = min + (peak - min) * (1 + cos(pi * p)) / 2
//     linear:   lr = peak - (peak - min) * p
//     constant: lr = peak
// so the last step trains at exactly min_lr for the decaying schedules.
#pragma once

#include <cstdint>

namespace fsdp::optim {

enum class LrDecay { Cosine, Linear, Constant };

struct LrSchedule {
  double peak_lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::Cosine;

  double at(int64_t step) const;
};

}  // namespace fsdp::optim
