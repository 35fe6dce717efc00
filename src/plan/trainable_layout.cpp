// Which layouts the trainer builds yet; see trainable_layout.h.
#include "fsdp/plan/trainable_layout.h"

#include <fmt/format.h>

namespace fsdp::plan {

std::optional<std::string> unbuilt_layout(const config::Config& cfg, bool gpu) {
  const int E = cfg.parallel.expert;
  if (E <= 1) return std::nullopt;
  if (!kExpertParallelWithTensorBuilt && cfg.parallel.tensor > 1)
    return fmt::format("parallel.expert {} with parallel.tensor {} is not built yet", E, cfg.parallel.tensor);
  if (!kExpertParallelWithLoraBuilt && cfg.lora.enabled)
    return fmt::format("parallel.expert {} with lora.enabled is not built yet", E);
  if (!kExpertParallelLoraWithTensorBuilt && cfg.lora.enabled && cfg.parallel.tensor > 1)
    return fmt::format("parallel.expert {} with lora.enabled and parallel.tensor {} is not built yet", E,
                       cfg.parallel.tensor);
  if (!kExpertParallelOnGpuBuilt && gpu)
    return fmt::format("parallel.expert {} on GPUs (train.device: cuda) is not built yet", E);
  return std::nullopt;
}

}  // namespace fsdp::plan
