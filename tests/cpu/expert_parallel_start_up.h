// What a rank of a mesh with E = 2 (and `tensor` tensor ranks) makes of a config at
// start-up (train::rank_model_config, then train::runs_on on `device`): shared by the
// layout tests (test_expert_parallel_layout.cpp) and the plan's refusal twins
// (test_memory_plan_expert.cpp).
#pragma once

#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/train/setup.h"

namespace fsdp::test {

// "expert_parallel N" (the model's expert degree) when the rank starts, else the config
// error's message.
inline std::string expert_parallel_start_up(const std::vector<std::string>& overrides, Device device = Device::cpu(),
                                            int tensor = 1) {
  dist::ProcessGroups g = dist::local_process_groups();
  dist::MeshShape shape;
  shape.expert = 2;
  shape.tensor = tensor;
  g.mesh = dist::DeviceMesh(shape, std::vector<int>(size_t(2 * tensor), 0));
  try {
    const config::Config cfg = config::load_config_string("", "configs/x.yaml", overrides);
    const model::LlamaConfig m = train::runs_on(train::rank_model_config(cfg, g), cfg, device);
    return "expert_parallel " + std::to_string(m.expert_parallel);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
}

}  // namespace fsdp::test
