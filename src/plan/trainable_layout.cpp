// Which layouts the trainer builds yet; see trainable_layout.h.
#include "fsdp/plan/trainable_layout.h"

#include <fmt/format.h>

namespace fsdp::plan {

std::optional<std::string> unbuilt_layout(const config::Config& cfg) {
  const int E = cfg.parallel.expert;
  if (E <= 1) return std::nullopt;
  if (!kExpertParallelLoraWithTensorBuilt && cfg.lora.enabled && cfg.parallel.tensor > 1)
    return fmt::format("parallel.expert {} with lora.enabled and parallel.tensor {} is not built yet", E,
                       cfg.parallel.tensor);
  return std::nullopt;
}

}  // namespace fsdp::plan
