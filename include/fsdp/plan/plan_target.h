// Where a memory plan is for (PlanTarget, memory_plan.h): how many ranks, on which device,
// and how much memory one of them may hold.
//   local_plan_target      this rank at start-up: its GPU's memory, or the host's limit
//                          (host_memory.h) shared by the node's ranks
//   requested_plan_target  what `fsdp_train plan` was told (--ranks, --ranks-per-node,
//                          --device, --device-memory), the rest from the config and this machine
#pragma once

#include <string>

#include "fsdp/config/config.h"
#include "fsdp/core/device.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/plan/memory_plan.h"

namespace fsdp::plan {

PlanTarget local_plan_target(const dist::WorldInfo& world, Device device);

struct PlanRequest {
  int ranks = 1;
  int ranks_per_node = 0;  // 0: 8 on a GPU, `ranks` on the CPU
  std::string device;      // "", "cpu" or "cuda" ("": what train.device resolves to here)
  std::string memory;      // --device-memory as written ("": this machine's)
};
// Throws UsageError (fsdp/core/cli_args.h) naming the flag: a size that is not one, or a GPU
// plan on a machine without a GPU and no --device-memory.
PlanTarget requested_plan_target(const PlanRequest& request, const config::Config& cfg);

}  // namespace fsdp::plan
