// Dynamic loss scaling for float16 compute (torch.amp.GradScaler's algorithm and defaults):
// the backward pass runs on loss * scale so that small gradients do not flush to zero in
// float16's narrow range; the optimizer sees the gradients divided by scale again. A step
// whose gradients hold an inf or NaN (the scale was too large for float16's 65504) is
// skipped and the scale halved; after growth_interval clean steps in a row it doubles.
//
// update() returns whether the step's gradients may be applied. The state (scale, clean
// steps, skipped steps) is saved in checkpoints so a resumed fp16 run continues exactly.
// Disabled (scale 1, never skips) for float32 and bfloat16, whose range is float32's.
#pragma once

#include <cmath>
#include <cstdint>

namespace fsdp::optim {

class DynamicLossScaler {
 public:
  static constexpr double kBackoffFactor = 0.5, kGrowthFactor = 2.0;

  DynamicLossScaler() = default;  // disabled
  DynamicLossScaler(double init_scale, int growth_interval)
      : enabled_(true), scale_(init_scale), growth_interval_(growth_interval) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }

  // After the step's gradients are reduced: found_inf when any gradient (equivalently the
  // global gradient norm) is not finite. Returns true when the optimizer may step.
  bool update(bool found_inf) {
    if (!enabled_) return true;
    if (found_inf) {
      scale_ *= kBackoffFactor;
      good_steps_ = 0;
      ++skipped_steps_;
      return false;
    }
    if (++good_steps_ >= growth_interval_) {
      // GradScaler does not grow past float32's largest finite value.
      if (std::isfinite(float(scale_ * kGrowthFactor))) scale_ *= kGrowthFactor;
      good_steps_ = 0;
    }
    return true;
  }

  // Checkpoint state.
  void restore(double scale, int64_t good_steps, int64_t skipped_steps) {
    if (!enabled_ || scale <= 0) return;  // a checkpoint of another dtype: keep the fresh state
    scale_ = scale;
    good_steps_ = good_steps;
    skipped_steps_ = skipped_steps;
  }

 private:
  bool enabled_ = false;
  double scale_ = 1.0;
  int growth_interval_ = 2000;
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace fsdp::optim
