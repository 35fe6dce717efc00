// Expert parallelism (issue 28; Note [Expert-parallel dispatch] in model/moe_dispatch.h)
// through the trainer, under mpiexec with 2 and 4 ranks (np1 has no layout). Every layout
// of one world size runs in the same launch, on groups split from the world:
//   2 ranks: E=2 (FULL_SHARD over both: the expert units are unsharded, mesh 1x1x2x1);
//   4 ranks: E=4 (1x1x4x1), E=2 with FULL_SHARD (1x2x2x1: each expert unit sharded over
//            2 ranks), E=2 with HYBRID_SHARD groups of 2 (2x1x2x1: replicated over 2), and
//            E=2 x T=2 (1x1x2x2: each rank its experts' tensor slices, Note [Experts under
//            expert and tensor parallelism] in model/moe_dispatch.h; Adam's eps 1e-5 there,
//            as the tensor-parallel tests have it, for their reason).
// Two models: an 8-expert top-2 tiny Mixtral (the load-balancing and z-losses, and
// auxiliary-loss-free balancing, whose biases follow the global expert counts) and
// tiny_moe's routing (8 experts, top-2) with its aux coefficient only. Against one process
// training the same global batch:
//  - every step's loss, aux loss and z-loss within 1e-5 relative, over 20 steps;
//  - every step's global expert counts equal to one process's, as integers, and the routing
//    biases equal bit for bit (a function of the counts: equal routing gives equal bits);
//  - every weight after the 20 steps within 1e-5 norm-wise: the expert GEMMs see the same
//    rows in another order (source rank by source rank), so their weight gradients sum in
//    another order: float rounding, nothing more;
//  - the same run twice, and under every activation checkpointing mode (full, selective,
//    full with offloading, every 2 blocks), the same bits: recompute dispatches again;
//  - the bytes each rank sends per step equal the theory (tests/common/
//    expert_parallel_bytes.h): FSDP's for both kinds of unit, and the all-to-alls' from the
//    step's routing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "../common/distributed_train_checks.h"
#include "../common/expert_parallel_bytes.h"
#include "../common/moe_run.h"
#include "../common/tensor_parallel_checks.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 20;
constexpr int kGlobalMicroBatches = 4;  // of 2 sequences, at every layout
constexpr double kTolerance = 1e-5;

// The two models: "mixtral8" (8 experts, top-2, every router loss and the biases) and
// "tiny_moe" (the preset's routing, shrunk).
std::vector<std::string> model_keys(const std::string& model) {
  std::vector<std::string> o = {"model.preset=tiny_moe", "model.num_layers=2",        "model.vocab_size=128",
                                "model.hidden_size=64",  "model.num_heads=4",         "model.num_kv_heads=2",
                                "model.intermediate_size=32", "model.num_experts=8", "model.experts_per_token=2"};
  if (model == "mixtral8") {
    o.insert(o.end(), {"model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001",
                       "model.router_bias_update_rate=0.01"});
  }
  return o;
}

// `expert` 0: one process. The global batch is the same at every layout.
config::Config moe_config(const std::string& model, int expert, int data_ranks,
                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = model_keys(model);
  o.insert(o.end(), {"train.seq_len=16", "train.micro_batch_size=2", "optim.lr=3e-3", "optim.warmup_steps=3",
                     "train.max_steps=100", "logging.metrics=false", "checkpoint.resume=none",
                     "train.grad_accum_steps=" + std::to_string(kGlobalMicroBatches / data_ranks)});
  if (expert > 0) {
    o.push_back("parallel.expert=" + std::to_string(expert));
  } else {
    o.push_back("fsdp.sharding_strategy=NO_SHARD");
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

// weights: every parameter this rank holds (its experts), whole.
using test::MoeRun;

// The data-parallel ranks of a world of n: its tensor groups read the same micro-batches.
int data_parallel_ranks(int n, int tensor) { return n / tensor; }

MoeRun train(const config::Config& cfg, dist::ProcessGroups& groups, int steps) {
  train::Trainer t(cfg, groups);
  return test::run_moe(t, groups, steps);
}

// One process over the same global batch (every rank computes it alone) with the layout's
// optimizer keys (`optim`), cached per model and keys.
const MoeRun& reference(const std::string& model, const std::vector<std::string>& optim = {}) {
  static auto& runs = *new std::map<std::string, MoeRun>;  // never destroyed: its tensors outlive the allocator
  std::string key = model;
  for (const std::string& o : optim) key += " " + o;
  if (!runs.count(key)) {
    auto local = dist::local_process_groups();
    runs[key] = train(moe_config(model, 0, 1, optim), local, kSteps);
  }
  return runs.at(key);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(std::abs(got[i] - want[i]) / std::abs(want[i]), kTolerance)
        << what << " step " << i + 1 << ": " << got[i] << " vs " << want[i];
}

void expect_same_bits(const MoeRun& again, const MoeRun& got, const std::string& what) {
  EXPECT_EQ(again.losses, got.losses) << what;
  EXPECT_EQ(again.load, got.load) << what;
  EXPECT_EQ(again.bias, got.bias) << what;
  for (const auto& [name, w] : got.weights)
    EXPECT_EQ(std::memcmp(again.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << what << ": " << name;
}

struct Layout {
  int expert;
  std::vector<std::string> keys;  // the FSDP keys (and parallel.tensor)
  std::string name;
  int tensor = 1;
  std::vector<std::string> optim = {};  // optimizer keys, the one-process reference's too
};

// Adam's eps under tensor parallelism: test_tensor_parallel.cpp says why.
const std::vector<std::string> kTensorOptim = {"optim.eps=1e-5"};

std::vector<Layout> layouts(int world) {
  if (world == 2) return {{2, {}, "E=2"}};
  if (world == 4) {
    return {{4, {}, "E=4"},
            {2, {}, "E=2 x FULL_SHARD 2"},
            {2, {"fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"}, "E=2 x HYBRID_SHARD 2x2"},
            {2, {"parallel.tensor=2"}, "E=2 x T=2", 2, kTensorOptim}};
  }
  return {};
}

std::vector<std::string> layout_keys(const Layout& l, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> keys = l.keys;
  keys.insert(keys.end(), l.optim.begin(), l.optim.end());
  keys.insert(keys.end(), extra.begin(), extra.end());
  return keys;
}

void expect_equals_one_process(const std::string& model) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (layouts(n).empty()) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  for (const Layout& l : layouts(n)) {
    // E x T with the richer model alone: its 20 steps cost the most (the tensor group's
    // collectives on oversubscribed ranks), and tiny_moe's routing adds nothing to them.
    if (l.tensor > 1 && model != "mixtral8") continue;
    SCOPED_TRACE(model + " " + l.name);
    const MoeRun& want = reference(model, l.optim);
    const config::Config cfg = moe_config(model, l.expert, data_parallel_ranks(n, l.tensor), layout_keys(l));
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    ASSERT_EQ(groups.mesh.shape().expert, l.expert);
    ASSERT_EQ(groups.mesh.shape().tensor, l.tensor);
    const MoeRun got = train(cfg, groups, kSteps);
    expect_near(got.losses, want.losses, "loss");
    expect_near(got.aux, want.aux, "aux loss");
    if (model == "mixtral8") expect_near(got.z, want.z, "z-loss");
    EXPECT_EQ(got.load, want.load) << "the global expert counts";
    EXPECT_EQ(got.bias, want.bias) << "the routing biases";
    // This rank's slots: its experts (8 / E of them per layer) and every other parameter.
    EXPECT_EQ(got.weights.size(), want.weights.size() - size_t(2 * 3 * (8 - 8 / l.expert)));
    double worst_loss = 0, worst_weight = 0;
    for (size_t i = 0; i < got.losses.size() && i < want.losses.size(); ++i)
      worst_loss = std::max(worst_loss, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
    for (const auto& [name, w] : got.weights) {
      ASSERT_TRUE(want.weights.count(name)) << name;
      const double e = test::rel_norm_error(w, want.weights.at(name));
      worst_weight = std::max(worst_weight, e);
      EXPECT_LT(e, kTolerance) << name;
    }
    // The measured distances, which docs/expert-parallelism.md quotes.
    if (world.world->rank() == 0)
      std::printf("%s %s: worst loss %.1e relative, worst weight %.1e norm-wise\n", model.c_str(), l.name.c_str(),
                  worst_loss, worst_weight);
  }
}

TEST(ExpertParallel, Mixtral8EqualsOneProcess) { expect_equals_one_process("mixtral8"); }
TEST(ExpertParallel, TinyMoeEqualsOneProcess) { expect_equals_one_process("tiny_moe"); }

// The same run twice, and every checkpointing mode: the same bits (at the first layout, and
// at E=2 x T=2, where the recompute gathers, dispatches and reduce-scatters again: 2 steps
// there, an update and a step on it, for its cost).
TEST(ExpertParallel, DeterministicUnderEveryCheckpointingMode) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (layouts(n).empty()) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  std::vector<Layout> checked = {layouts(n).front()};
  if (layouts(n).back().tensor > 1) checked.push_back(layouts(n).back());
  for (const Layout& l : checked) {
    SCOPED_TRACE(l.name);
    const int kShortSteps = l.tensor > 1 ? 2 : 4;
    const int dp = data_parallel_ranks(n, l.tensor);
    const config::Config cfg = moe_config("mixtral8", l.expert, dp, layout_keys(l));
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    const MoeRun got = train(cfg, groups, kShortSteps);
    expect_same_bits(train(cfg, groups, kShortSteps), got, "the same run twice");
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{"train.activation_checkpointing=full"},
          std::vector<std::string>{"train.activation_checkpointing=selective"},
          std::vector<std::string>{"train.activation_checkpointing=full", "train.activation_offload=true"},
          std::vector<std::string>{"train.activation_checkpointing=selective",
                                   "train.activation_checkpointing_every=2"}}) {
      expect_same_bits(train(moe_config("mixtral8", l.expert, dp, layout_keys(l, mode)), groups, kShortSteps), got,
                       mode.front() + (mode.size() > 1 ? " + " + mode.back() : ""));
    }
  }
}

// moe.capacity_factor (Note [Expert capacity]): the capacity is each micro-batch's, so every
// layout drops exactly the pairs one process drops, before any dispatch: the same drop counts
// (integers), the same losses within 1e-5, the same bits twice.
TEST(ExpertParallel, CapacityFactorDropsWhatOneProcessDrops) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (layouts(n).empty()) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  constexpr int kCapacitySteps = 6;
  const std::vector<std::string> capacity = {"moe.capacity_factor=0.5"};
  auto local = dist::local_process_groups();
  const MoeRun want = train(moe_config("tiny_moe", 0, 1, capacity), local, kCapacitySteps);
  for (const int64_t d : want.dropped) EXPECT_GT(d, 0) << "a capacity of half the mean load drops pairs";
  // E = 2 alone (2 ranks); E = 4, E = 2 x HYBRID_SHARD and E = 2 x T = 2 (4 ranks: every
  // tensor rank drops what its group's first does, the same pairs of the same rows; Adam's
  // default eps, which 6 steps' losses do not feel, and no second run: the deterministic
  // test runs it twice).
  std::vector<Layout> checked = layouts(n);
  if (checked.size() > 2) checked.erase(checked.begin() + 1);
  for (const Layout& l : checked) {
    SCOPED_TRACE(l.name);
    std::vector<std::string> keys = l.keys;
    keys.insert(keys.end(), capacity.begin(), capacity.end());
    const config::Config cfg = moe_config("tiny_moe", l.expert, data_parallel_ranks(n, l.tensor), keys);
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    const MoeRun got = train(cfg, groups, kCapacitySteps);
    EXPECT_EQ(got.dropped, want.dropped) << "the pairs dropped per step";
    EXPECT_EQ(got.load, want.load) << "the routing's counts, before the drops";
    expect_near(got.losses, want.losses, "loss");
    if (l.tensor == 1) expect_same_bits(train(cfg, groups, kCapacitySteps), got, "the same run twice");
  }
}

// The theory: tests/common/expert_parallel_bytes.h (float64 counts on the CPU).
TEST(ExpertParallel, BytesPerStepEqualTheTheory) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (layouts(n).empty()) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  for (const Layout& l : layouts(n)) {
    for (const bool full : {false, true}) {
      // One micro-batch: its routing is the step's.
      std::vector<std::string> keys = layout_keys(l, {"train.grad_accum_steps=1"});
      if (full) keys.push_back("train.activation_checkpointing=full");
      const config::Config cfg = moe_config("mixtral8", l.expert, data_parallel_ranks(n, l.tensor), keys);
      auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
      train::Trainer t(cfg, groups);
      for (int i = 0; i < 2; ++i) {
        const obs::StepMetrics m = t.train_step();
        EXPECT_EQ(m.mesh, groups.mesh.shape().str());
        EXPECT_NE(obs::format_step_line(m, 2).find(" | mesh " + groups.mesh.shape().str()), std::string::npos);
        EXPECT_EQ(double(m.comm_bytes), test::expert_parallel_step_bytes(t, groups, full))
            << l.name << (full ? " full checkpointing" : "") << " step " << i + 1;
      }
    }
  }
}

}  // namespace
}  // namespace fsdp
