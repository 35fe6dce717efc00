// The memory plan (fsdp/plan/memory_plan.h) against what the trainer really allocates, on
// 1, 2 and 4 ranks: for each configuration (dense and MoE; LoRA and QLoRA; tensor and expert
// parallelism; every strategy;
// none, selective and full checkpointing, with offloading; accumulation on and off; bf16
// collectives) a
// trainer runs a step and the CPU allocator's peak over its construction and that step
// must lie within 1% of the plan's tensor peak (the issue asks for 10%; the difference
// measured is a few hundred bytes of transients, under 0.01%). The engine's share is checked
// exactly: engine_memory's sharded state and gathered buffers against the engine's own
// persistent_bytes() and buffer_bytes(), which also holds the replay of the engine's
// buffer pool to the engine itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "fsdp/config/model_options.h"
#include "fsdp/core/allocator.h"
#include "fsdp/core/copy_stream.h"
#include "fsdp/fsdp/engine_memory.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/setup.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

struct Case {
  const char* name;
  std::vector<std::string> settings;
};

std::vector<Case> cases(int world) {
  const std::string half = "fsdp.shard_group_size=" + std::to_string(world >= 2 ? world / 2 : 1);
  const std::vector<std::string> moe = {"model.preset=tiny_moe", "model.num_experts=4"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> lora = {"lora.enabled=true", "lora.rank=4", "lora.targets=all-linear",
                                         "lora.dropout=0.1"};
  const std::vector<std::string> qlora = with(lora, {"model.quantization=nf4"});
  return {
      {"dense FULL_SHARD none", {"fsdp.sharding_strategy=FULL_SHARD"}},
      {"dense FULL_SHARD full, accumulation",
       {"fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=full", "train.grad_accum_steps=2"}},
      {"dense SHARD_GRAD_OP selective, prefetch 1",
       {"fsdp.sharding_strategy=SHARD_GRAD_OP", "train.activation_checkpointing=selective", "fsdp.prefetch_limit=1"}},
      {"dense HYBRID_SHARD none, bf16 collectives",
       {"fsdp.sharding_strategy=HYBRID_SHARD", half, "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"}},
      // PyTorch's _HYBRID_SHARD_ZERO2: every block stays gathered from its forward to its backward.
      {"dense HYBRID_SHARD_ZERO2 selective, bf16 gathers",
       {"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2", half, "train.activation_checkpointing=selective",
        "fsdp.param_dtype=bfloat16"}},
      {"dense NO_SHARD full every 2, accumulation",
       {"fsdp.sharding_strategy=NO_SHARD", "train.activation_checkpointing=full",
        "train.activation_checkpointing_every=2", "train.grad_accum_steps=2"}},
      {"dense FULL_SHARD selective + offload, bf16 gathers",
       {"fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=selective", "train.activation_offload=true",
        "train.activation_offload_horizon=1", "fsdp.param_dtype=bfloat16"}},
      {"moe FULL_SHARD selective, accumulation",
       with(moe, {"fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=selective",
                  "train.grad_accum_steps=2"})},
      {"moe SHARD_GRAD_OP full + offload",
       with(moe, {"fsdp.sharding_strategy=SHARD_GRAD_OP", "train.activation_checkpointing=full",
                  "train.activation_offload=true"})},
      {"moe HYBRID_SHARD none, bf16 reductions",
       with(moe, {"fsdp.sharding_strategy=HYBRID_SHARD", half, "fsdp.reduce_dtype=bfloat16"})},
      // LoRA and QLoRA: adapter shards, frozen shards and their uint8 gathers, the skipped
      // backward gather of the frozen embedding, the adapters' scratch.
      {"lora FULL_SHARD selective, accumulation",
       with(lora, {"fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=selective",
                   "train.grad_accum_steps=2"})},
      {"lora SHARD_GRAD_OP full + offload, bf16 gathers",
       with(lora, {"fsdp.sharding_strategy=SHARD_GRAD_OP", "train.activation_checkpointing=full",
                   "train.activation_offload=true", "fsdp.param_dtype=bfloat16"})},
      {"qlora FULL_SHARD full, prefetch 1",
       with(qlora, {"fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=full", "fsdp.prefetch_limit=1"})},
      {"qlora HYBRID_SHARD none, bf16 reductions",
       with(qlora, {"fsdp.sharding_strategy=HYBRID_SHARD", half, "fsdp.reduce_dtype=bfloat16"})},
      {"moe qlora NO_SHARD selective", with(with(moe, qlora), {"fsdp.sharding_strategy=NO_SHARD",
                                                                "train.activation_checkpointing=selective"})},
  };
}

// Tensor parallelism (T=2) on the worlds that hold it: this tensor rank's slices sharded
// over the data-parallel ranks, activations over the tensor group, its scratch buffers.
std::vector<Case> tensor_parallel_cases(int world) {
  if (world % 2 != 0) return {};
  const std::string half = "fsdp.shard_group_size=" + std::to_string(world >= 4 ? world / 4 : 1);
  return {
      {"dense T=2 FULL_SHARD none", {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD"}},
      {"dense T=2 FULL_SHARD full, accumulation",
       {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=full",
        "train.grad_accum_steps=2"}},
      {"dense T=2 SHARD_GRAD_OP selective + offload",
       {"parallel.tensor=2", "fsdp.sharding_strategy=SHARD_GRAD_OP", "train.activation_checkpointing=selective",
        "train.activation_offload=true", "train.activation_offload_horizon=1"}},
      {"dense T=2 HYBRID_SHARD none, bf16 collectives",
       {"parallel.tensor=2", "fsdp.sharding_strategy=HYBRID_SHARD", half, "fsdp.param_dtype=bfloat16",
        "fsdp.reduce_dtype=bfloat16"}},
      // LoRA: each adapter and the frozen base split as its base, the scratch at the slices' widths.
      {"lora T=2 FULL_SHARD selective",
       {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=selective",
        "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear", "lora.dropout=0.1"}},
      // QLoRA: each rank's NF4 slices with a float absmax per block (MLP 384: down's 192
      // columns per rank are whole blocks).
      {"qlora T=2 FULL_SHARD full",
       {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=full",
        "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear", "model.quantization=nf4",
        "model.intermediate_size=384"}},
      // Mixtral: every expert's slice, the routing over all N tokens, the partial combine.
      {"moe T=2 FULL_SHARD selective",
       {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD", "train.activation_checkpointing=selective",
        "model.preset=tiny_moe", "model.num_experts=4"}},
  };
}

// Expert parallelism (E=2 of 4 experts) on the worlds that hold it: expert units over the
// ranks holding the same experts, gathered beside their blocks, the expert side's
// activations for the worst routing.
// On 2 ranks FULL_SHARD's expert units are direct; on 4 they are gathered over 2 ranks, and
// HYBRID_SHARD's over one rank in bf16 (pool buffers all the same).
std::vector<Case> expert_parallel_cases(int world) {
  if (world % 2 != 0) return {};
  std::vector<Case> out = {
      {"moe E=2 FULL_SHARD selective, accumulation",
       {"parallel.expert=2", "model.preset=tiny_moe", "model.num_experts=4", "fsdp.sharding_strategy=FULL_SHARD",
        "train.activation_checkpointing=selective", "train.grad_accum_steps=2"}}};
  if (world >= 4)
    out.push_back({"moe E=2 HYBRID_SHARD full, bf16 collectives",
                   {"parallel.expert=2", "model.preset=tiny_moe", "model.num_experts=4",
                    "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=" + std::to_string(world / 2),
                    "train.activation_checkpointing=full", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"}});
  return out;
}

config::Config tiny(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny", "model.num_layers=6", "train.seq_len=64",
                                "train.micro_batch_size=2", "logging.metrics=false", "checkpoint.resume=none",
                                "data.num_workers=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

TEST(MemoryPlan, PeakMatchesTheAllocatorAndTheEngineExactly) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  std::vector<Case> all = cases(n);
  for (const Case& c : tensor_parallel_cases(n)) all.push_back(c);
  for (const Case& c : expert_parallel_cases(n)) all.push_back(c);
  for (const Case& c : all) {
    const config::Config cfg = tiny(c.settings);
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    Allocator& mem = allocator_for(Device::cpu());
    const size_t before = mem.stats().current_bytes, host_before = CopyStream::host_stats().current_bytes;
    mem.reset_peak();
    train::Trainer t(cfg, groups);
    t.train_step();  // the peak: every buffer is allocated by the end of the first step
    const double measured = double(mem.stats().peak_bytes - before);
    const plan::MemoryPlan& plan = t.memory_plan();
    EXPECT_NEAR(plan.tensor_peak / measured, 1.0, 0.01) << c.name << " on " << n << " ranks";
    double arena = 0;
    for (const plan::PlanRow& r : plan.rows)
      if (r.name.find("host arena") != std::string::npos) arena = r.bytes;
    EXPECT_EQ(arena, double(CopyStream::host_stats().current_bytes - host_before)) << c.name;

    std::vector<UnitShape> units;
    for (const auto& u : t.model().units()) {
      const bool experts = u.experts_of >= 0;  // sharded over the ranks holding the same experts
      units.push_back({double(u.numel), 1, double(u.frozen_bytes), experts, experts ? groups.expert_shard->size() : 0});
    }
    const EngineMemory e = engine_memory(units, groups.shard->size(), config::fsdp_options(cfg), cfg.train.grad_accum_steps);
    EXPECT_EQ(e.master + e.grads + e.moments + e.frozen, double(t.engine().persistent_bytes())) << c.name;
    EXPECT_EQ(e.frozen, double(t.engine().frozen_bytes())) << c.name;
    EXPECT_EQ(e.gathered() + e.staging, double(t.engine().buffer_bytes())) << c.name;
    if (world.world->rank() == 0)
      std::printf("[memory plan] %-52s %d rank(s): plan %.0f B, measured %.0f B (%+.2f%%)\n", c.name, n,
                  plan.tensor_peak, measured, 100.0 * (plan.tensor_peak / measured - 1.0));
  }
}

}  // namespace
}  // namespace fsdp
