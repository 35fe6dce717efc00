// What the mixture-of-experts layout tests record of a run and hold to one process's
// (tests/mpi/test_expert_parallel.cpp, test_tensor_parallel_moe.cpp and, on CUDA,
// tests/cuda_mpi/test_expert_parallel_cuda.cpp): every step's losses and global expert
// counts, then the routing biases and the parameters.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/train/trainer.h"
#include "tensor_parallel_checks.h"

namespace fsdp::test {

struct MoeRun {
  std::vector<double> losses, aux, z;  // aux and z: -1 where the step has none
  std::vector<std::vector<std::vector<int64_t>>> load;  // [step][layer][expert]
  std::vector<int64_t> dropped;                          // per step (moe.capacity_factor), -1 without
  std::vector<std::vector<float>> bias;
  std::map<std::string, Tensor> weights;  // by parameter name, whole

  void add_step(const obs::StepMetrics& m) {
    losses.push_back(m.loss);
    aux.push_back(m.aux_loss.value_or(-1));
    z.push_back(m.z_loss.value_or(-1));
    load.push_back(m.expert_load);
    dropped.push_back(m.dropped.value_or(-1));
  }
};

// `steps` steps of `t` (a CPU run on `groups`), then its routing biases and every parameter
// this rank holds, each slot whole across the tensor group's slices.
inline MoeRun run_moe(train::Trainer& t, dist::ProcessGroups& groups, int steps) {
  MoeRun r;
  for (int i = 0; i < steps; ++i) r.add_step(t.train_step());
  r.bias = t.model().router_bias()->values();
  CommTensorGroup tensor(*groups.tensor);
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor local = t.engine().gather_full(u).clone();
    for (const model::ParamSlot& s : t.model().units()[size_t(u)].params)
      r.weights[s.name] = whole_parameter(s, local, groups.tensor->size() > 1 ? &tensor : nullptr);
  }
  return r;
}

}  // namespace fsdp::test
