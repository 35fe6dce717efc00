// What the plan tests (test_memory_plan.cpp, test_memory_plan_expert.cpp) share: a job to
// plan for and one row of a plan.
#pragma once

#include <string>

#include "fsdp/plan/memory_plan.h"

namespace fsdp::test {

// `ranks` ranks, `per_node` per node, on GPUs or the CPU, each with `bytes` of memory.
inline plan::PlanTarget plan_target(int ranks, int per_node, bool gpu, double bytes) {
  plan::PlanTarget t;
  t.ranks = ranks;
  t.ranks_per_node = per_node;
  t.gpu = gpu;
  t.device_bytes = bytes;
  t.device_source = "test";
  return t;
}

// The bytes of the plan's row `name` (0 when it has none).
inline double plan_row(const plan::MemoryPlan& p, const std::string& name) {
  for (const auto& r : p.rows)
    if (r.name == name) return r.bytes;
  return 0;
}

}  // namespace fsdp::test
