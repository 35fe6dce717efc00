// The start-up memory check; see memory_check.h.
#include "fsdp/train/memory_check.h"

#include <spdlog/spdlog.h>

#include "fsdp/train/host_memory.h"
#include "fsdp/train/setup.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

PlanTarget local_plan_target(const dist::WorldInfo& world, Device device) {
  PlanTarget t;
  t.ranks = world.size;
  t.ranks_per_node = world.local_size;
  t.gpu = device.is_cuda();
#if defined(FSDP_WITH_CUDA)
  if (t.gpu) {
    t.device_bytes = double(cuda::device_memory_bytes(device.index));
    t.device_source = fmt::format("{} ({})", device.str(), cuda::device_name(device.index));
    return t;
  }
#endif
  const int share = std::max(world.local_size, 1);
  const HostMemory host = host_memory_limit(share);
  t.device_bytes = host.bytes;
  if (host.node_wide) t.node_bytes = host.bytes * share;
  t.device_source = host.node_wide && share > 1
                        ? fmt::format("{} shared by {} ranks on {}", host.source, share, world.hostname)
                        : host.source;
  return t;
}

MemoryPlan check_memory(const config::Config& cfg, const dist::WorldInfo& world, Device device) {
  return check_memory(cfg, local_plan_target(world, device), world.rank == 0);
}

MemoryPlan check_memory(const config::Config& cfg, const PlanTarget& target, bool speak) {
  const model::LlamaConfig model = training_model_config(cfg);
  const MemoryPlan plan = plan_memory(cfg, model, target);
  if (plan.fits()) {
    if (speak) spdlog::info("{}", format_plan(plan));
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

}  // namespace fsdp::train
