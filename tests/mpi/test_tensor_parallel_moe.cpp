// Mixtral under tensor parallelism (issue 27 item 3; Note [Experts under tensor
// parallelism] in model/mlp_moe.h) through the trainer, under mpiexec with 2 and 4 ranks
// (np1 has no layout): a tiny Mixtral (4 experts, top-2, GQA 2, the load-balancing and
// z-losses, auxiliary-loss-free balancing) at T=2 (2 ranks: mesh 1x1x2; 4 ranks: T=2 x
// FULL_SHARD 2, mesh 1x2x2), T=2 x SHARD_GRAD_OP, T=4 (4 ranks: 1x1x4) and T=2 x
// HYBRID_SHARD (4 ranks: 2x1x2) equals one process training the same global batch, 20 steps:
//  - every step's loss, aux loss and z-loss within 1e-5 relative, every weight within 1e-5
//    norm-wise (test_tensor_parallel.cpp's bounds and Adam eps, for its reasons);
//  - every step's expert counts equal to one process's, as integers: the tensor ranks routed
//    the same tokens and one of them counts them (counted T times, they would be T x);
//  - the routing biases equal to one process's bit for bit: they are a function of the
//    step's integer counts, computed on the host in a fixed order, so equal routing gives
//    equal bits (a token whose top-2 flipped on rounding would show as 2 x rate);
//  - the router's weights within the bound: its gradient sums partial routing terms over
//    the tensor group plus the router losses' term, added 1/T per rank (counted T times,
//    the aux loss's share would move it by far more than 1e-5 over 20 steps);
//  - the same run twice, and under every checkpointing mode, the same bits;
//  - with LoRA on every linear layer (router and experts included, dropout 0.1) the same
//    losses, counts, biases and adapters as one process;
//  - a checkpoint saved at T=2 resumes at T=1 (FULL_SHARD over every rank) on the
//    uninterrupted curve, biases included;
//  - model.init_from a Mixtral folder at T=2 (transformers 4's per-expert tensors and 5's
//    fused ones) loads one process's weights to the bit: each rank reads its slices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "../common/distributed_train_checks.h"
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
constexpr double kParamTolerance = 1e-5;

// `tensor` 0: one process. The global batch is the same at every layout.
config::Config tiny_moe(int tensor, int data_ranks, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {
      "model.preset=tiny",           "model.num_layers=2",           "model.vocab_size=128",
      "model.hidden_size=64",        "model.num_heads=8",            "model.num_kv_heads=4",
      "model.intermediate_size=64",  "model.num_experts=4",          "model.experts_per_token=2",
      "model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001", "model.router_bias_update_rate=0.01",
      "train.seq_len=16",            "train.micro_batch_size=2",     "optim.lr=3e-3", "optim.eps=1e-5",
      "optim.warmup_steps=3",        "train.max_steps=100",          "logging.metrics=false",
      "checkpoint.keep_last=10",     "train.grad_accum_steps=" + std::to_string(kGlobalMicroBatches / data_ranks)};
  if (tensor > 0) {
    o.push_back("parallel.tensor=" + std::to_string(tensor));
  } else {
    o.push_back("fsdp.sharding_strategy=NO_SHARD");
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

using test::MoeRun;  // weights: every parameter, whole

// `steps` steps, then (with `save`) a checkpoint.
MoeRun train(const config::Config& cfg, dist::ProcessGroups& groups, int steps, bool save = false) {
  train::Trainer t(cfg, groups);
  MoeRun r = test::run_moe(t, groups, steps);
  if (save) {
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  return r;
}

// One process over the same global batch (every rank computes it alone), cached.
const MoeRun& reference() {
  static auto& run = *new MoeRun([] {
    auto local = dist::local_process_groups();
    return train(tiny_moe(0, 1, {"checkpoint.resume=none"}), local, kSteps);
  }());
  return run;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                 size_t first = 0) {
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(std::abs(got[i] - want[first + i]) / std::abs(want[first + i]), kTolerance)
        << what << " step " << first + i + 1 << ": " << got[i] << " vs " << want[first + i];
}

void expect_same_bits(const MoeRun& again, const MoeRun& got, const std::string& what) {
  EXPECT_EQ(again.losses, got.losses) << what;
  EXPECT_EQ(again.bias, got.bias) << what;
  for (const auto& [name, w] : got.weights)
    EXPECT_EQ(std::memcmp(again.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << what << ": " << name;
}

// Every activation checkpointing mode: the same bits as none (selective keeps the routing
// and recomputes the gathered rows; full reruns the forward, routing included; offloading
// moves what full keeps).
const std::vector<std::vector<std::string>> kCheckpointing = {
    {},
    {"train.activation_checkpointing=full"},
    {"train.activation_checkpointing=selective"},
    {"train.activation_checkpointing=full", "train.activation_offload=true", "train.activation_offload_horizon=1"},
};

// T=2 (on 4 ranks with FULL_SHARD 2), T=2 x SHARD_GRAD_OP and, where the world holds them,
// T=4 (mesh 1x1x4: each rank 16 of every expert's 64 columns, 2 of 8 heads) and T=2 x
// HYBRID_SHARD (2x1x2: the replicate all-reduce beside the tensor group), each run again
// twice and under every checkpointing mode (about 2 s at np4 in all).
TEST(TensorParallelMoe, EveryLayoutEqualsOneProcessAndEveryCheckpointingModeTheSameBits) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  struct Layout {
    int tensor;
    std::string strategy;
    std::vector<std::string> keys;
  };
  const std::vector<Layout> layouts = {
      {2, "FULL_SHARD", {}},
      {4, "FULL_SHARD", {}},
      {2, "SHARD_GRAD_OP", {"fsdp.sharding_strategy=SHARD_GRAD_OP"}},
      {2, "HYBRID_SHARD", {"fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=1"}},
  };
  for (const Layout& l : layouts) {
    const int T = l.tensor;
    if (n % T != 0 || (l.strategy == "HYBRID_SHARD" && n / T < 2)) continue;
    const std::string at = "T=" + std::to_string(T) + " " + l.strategy + ": ";
    std::vector<std::string> keys = {"checkpoint.resume=none"};
    keys.insert(keys.end(), l.keys.begin(), l.keys.end());
    const config::Config cfg = tiny_moe(T, n / T, keys);
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    const MoeRun got = train(cfg, groups, kSteps);
    const MoeRun& want = reference();
    expect_near(got.losses, want.losses, at + "loss");
    expect_near(got.aux, want.aux, at + "aux loss");
    expect_near(got.z, want.z, at + "z-loss");
    EXPECT_EQ(got.load, want.load) << at << "the expert counts";
    EXPECT_EQ(got.bias, want.bias) << at << "the routing biases";
    EXPECT_GT(model::router_bias_max_abs(want.bias), 0.0f) << "the biases never moved";
    ASSERT_EQ(got.weights.size(), want.weights.size());
    for (const auto& [name, w] : want.weights) {
      ASSERT_TRUE(got.weights.count(name)) << name;
      EXPECT_LT(test::rel_norm_error(got.weights.at(name), w), kParamTolerance) << at << name;
    }
    // Again, and under each checkpointing mode: the same bits.
    for (const std::vector<std::string>& mode : kCheckpointing) {
      std::vector<std::string> again = keys;
      again.insert(again.end(), mode.begin(), mode.end());
      expect_same_bits(train(tiny_moe(T, n / T, again), groups, kSteps), got,
                       at + (mode.empty() ? "the same run twice" : mode.back()));
    }
  }
}

// LoRA on every linear layer of the Mixtral (the router and each expert's w1, w2, w3
// included; dropout 0.1): the adapters follow their base (Note [LoRA under tensor
// parallelism]) and each expert's rows keep one process's sorted positions, so the dropout
// masks are one process's too.
TEST(TensorParallelMoe, LoraOnEveryLinearEqualsOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  const std::vector<std::string> lora = {"checkpoint.resume=none", "lora.enabled=true",     "lora.rank=4",
                                         "lora.alpha=8",           "lora.targets=all-linear", "lora.dropout=0.1"};
  const config::Config cfg = tiny_moe(2, n / 2, lora);
  auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  const MoeRun got = train(cfg, groups, kSteps);
  auto local = dist::local_process_groups();
  const MoeRun want = train(tiny_moe(0, 1, lora), local, kSteps);
  expect_near(got.losses, want.losses, "loss");
  EXPECT_EQ(got.load, want.load) << "the expert counts";
  EXPECT_EQ(got.bias, want.bias) << "the routing biases";
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (const auto& [name, w] : want.weights)
    EXPECT_LT(test::rel_norm_error(got.weights.at(name), w), kParamTolerance) << name;
}

TEST(TensorParallelMoe, CheckpointAtT2ResumesAtT1) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  const std::string dir = test::shared_scratch(*world.world, "fsdp_tp_moe_ckpt");
  const int half = kSteps / 2;
  {
    const config::Config cfg = tiny_moe(2, n / 2, {"checkpoint.resume=none", "run.dir=" + dir});
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    train(cfg, groups, half, /*save=*/true);
  }
  world.world->barrier();
  const config::Config cfg =
      tiny_moe(1, n, {"checkpoint.resume=" + test::checkpoint_step_dir(dir, half), "run.dir=" + dir});
  auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  const MoeRun got = train(cfg, groups, half);
  const MoeRun& want = reference();
  expect_near(got.losses, want.losses, "resumed at T=1", size_t(half));
  EXPECT_EQ(got.bias, want.bias) << "the routing biases";
  world.world->barrier();
}

TEST(TensorParallelMoe, InitFromAHuggingFaceFolderLoadsOneProcesssWeights) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  for (const char* folder : {"mixtral_tiny", "mixtral_tiny_fused"}) {
    const std::vector<std::string> o = {"model.init_from=" + std::string(FSDP_SOURCE_DIR) + "/tests/golden/" + folder,
                                        "train.seq_len=16", "train.micro_batch_size=2", "logging.metrics=false",
                                        "checkpoint.resume=none"};
    std::vector<std::string> tp = o, one = o;
    tp.push_back("parallel.tensor=2");
    one.push_back("fsdp.sharding_strategy=NO_SHARD");
    const config::Config cfg = config::load_config_string("data:\n  source: synthetic\n", "test", tp);
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    auto local = dist::local_process_groups();
    const MoeRun got = train(cfg, groups, 0);
    const MoeRun want = train(config::load_config_string("data:\n  source: synthetic\n", "test", one), local, 0);
    ASSERT_EQ(got.weights.size(), want.weights.size()) << folder;
    for (const auto& [name, w] : want.weights)
      EXPECT_EQ(std::memcmp(got.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << folder << ": " << name;
  }
}

}  // namespace
}  // namespace fsdp
