// The trainer's start-up memory check: the memory plan (memory_plan.h) for this rank's
// device, logged, and a run that cannot fit refused before anything is allocated, with the
// plan's table and what to change (train.allow_oversubscribe: true trains anyway).
#pragma once

#include "fsdp/config/config.h"
#include "fsdp/core/device.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/plan/plan_target.h"

namespace fsdp::plan {

// The plan for cfg on `target`. Throws config::ConfigError (exit 2) with the plan's verdict
// and advice when it does not fit, unless train.allow_oversubscribe (then it warns). `log`:
// print the table (rank 0).
MemoryPlan check_memory(const config::Config& cfg, const PlanTarget& target, bool log);
// The same for this rank: local_plan_target(world, device), logged by rank 0.
MemoryPlan check_memory(const config::Config& cfg, const dist::WorldInfo& world, Device device);

}  // namespace fsdp::plan
