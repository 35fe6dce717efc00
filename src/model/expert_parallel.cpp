// The expert-parallel layout's arithmetic; see expert_parallel.h.
#include "fsdp/model/expert_parallel.h"

#include <algorithm>

#include <fmt/format.h>

namespace fsdp::model {

std::optional<std::string> expert_parallel_problem(const LlamaConfig& cfg, int64_t expert) {
  if (expert < 1) return fmt::format("must be >= 1, got {}", expert);
  if (expert == 1) return std::nullopt;
  if (!cfg.is_moe())
    return fmt::format("{} needs a mixture of experts (model.num_experts > 0): a dense model has no experts to spread",
                       expert);
  if (cfg.num_experts % expert != 0)
    return fmt::format("{} must divide model.num_experts ({}): every rank of the expert group holds the same number "
                       "of whole experts",
                       expert, cfg.num_experts);
  return std::nullopt;
}

int64_t max_received_rows(const LlamaConfig& cfg, int64_t tokens) {
  if (!cfg.expert_units()) return tokens * cfg.experts_per_token;
  return cfg.expert_parallel * tokens * std::min(cfg.experts_per_token, cfg.local_experts());
}

}  // namespace fsdp::model
