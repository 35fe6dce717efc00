// The start-up memory check; see memory_check.h.
#include "fsdp/plan/memory_check.h"

#include <spdlog/spdlog.h>

#include "fsdp/config/model_options.h"

namespace fsdp::plan {

MemoryPlan check_memory(const config::Config& cfg, const dist::WorldInfo& world, Device device) {
  return check_memory(cfg, local_plan_target(world, device), world.rank == 0);
}

MemoryPlan check_memory(const config::Config& cfg, const PlanTarget& target, bool speak) {
  const model::LlamaConfig model = config::training_model_config(cfg);
  const MemoryPlan plan = plan_memory(cfg, model, target);
  if (plan.fits()) {
    // The table is for `fsdp_train plan` and logging.level: debug; the start-up log says
    // the answer in one line.
    if (speak) {
      spdlog::debug("{}", format_plan(plan));
      spdlog::info("memory plan: peak {} per rank of {} ({} headroom; the table: `fsdp_train plan` or "
                   "logging.level: debug)",
                   human_bytes(plan.peak), human_bytes(plan.target.device_bytes),
                   human_bytes(plan.target.device_bytes - plan.peak));
    }
    return plan;
  }
  const std::string advice = advise(cfg, model, plan);
  if (cfg.train.allow_oversubscribe) {
    if (speak) spdlog::warn("{}{} (training anyway: train.allow_oversubscribe is true)", format_plan(plan), advice);
    return plan;
  }
  if (speak) spdlog::error("{}", format_plan(plan));
  throw config::ConfigError(
      fmt::format("{}; refusing to start (train.allow_oversubscribe: true trains anyway)", advice));
}

}  // namespace fsdp::plan
