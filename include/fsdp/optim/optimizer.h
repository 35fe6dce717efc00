// AdamW over flat parameter buffers (or FSDP shards of them) and global grad-norm
// clipping. The optimizer sees only contiguous ranges [begin, end) of a unit's flat
// buffer; which elements decay comes as segments of the whole unit (built from the model's
// layout by fsdp/fsdp/unit_decay.h), so a rank stepping its shard applies exactly the
// decay a single process would.
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/ops/adamw.h"

namespace fsdp::optim {

struct DecaySegment {
  int64_t begin = 0, end = 0;  // element range in the unit's flat buffer
  bool decay = true;
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

// One AdamW update of the elements [begin, begin + param.numel()) of a unit, whose decay
// layout is `segments`. param / grad / exp_avg / exp_avg_sq are 1-D, contiguous, equal
// length. `step` is 1-based. grad_scale multiplies the gradient (clipping).
void adamw_step_range(const std::vector<DecaySegment>& segments, int64_t begin, const Tensor& param,
                      const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, const AdamWConfig& cfg,
                      double lr, int64_t step, double grad_scale);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (total_norm + 1e-6));
// max_norm <= 0 disables clipping (factor 1).
double clip_factor(double total_norm, double max_norm);

}  // namespace fsdp::optim
