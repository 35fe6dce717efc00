// Checkpoints across ranks, under mpirun with 1, 2 and 4 ranks:
//  - bit-exact resume for every sharding strategy (and an asynchronous save): training 2K
//    steps straight equals K steps, save, a new trainer resuming, K more steps — losses
//    and final parameters bit for bit;
//  - resharding: a checkpoint saved under one layout (world size / strategy) continues
//    under another with losses within fp32 reduction tolerance of the uninterrupted run
//    (the global batch is kept equal, so the data is the same).
// The CLI-level N -> M cases (2->1, 1->4, 4->2, 4->3) are tests/integration/ckpt_reshard.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "../common/distributed_train_checks.h"
#include "../common/masked_corpus.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
constexpr int K = 3;

std::string shared_scratch(const std::string& name) {
  return test::shared_scratch(*test::world_groups().world, "fsdp_mpi_ckpt_" + name);
}

config::Config tiny(const std::string& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny",          "model.num_layers=2",   "model.vocab_size=97",
                                "model.hidden_size=36",       "model.num_heads=3",    "model.num_kv_heads=1",
                                "model.intermediate_size=50", "train.seq_len=16",     "train.micro_batch_size=2",
                                "optim.lr=3e-3",              "optim.warmup_steps=2", "train.max_steps=20",
                                "logging.metrics=false",      "run.dir=" + dir,       "checkpoint.keep_last=10"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

struct Curve {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // every unit gathered in full
};

void gather_params(train::Trainer& t, Curve& c) {
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor full = t.engine().gather_full(u).clone();
    c.params.emplace_back(full.data<float>(), full.data<float>() + full.numel());
  }
}

Curve straight(const config::Config& cfg, dist::ProcessGroups& groups, int steps) {
  train::Trainer t(cfg, groups);
  EXPECT_EQ(t.resumed_from(), "");
  Curve c;
  for (int i = 0; i < steps; ++i) c.losses.push_back(t.train_step().loss);
  gather_params(t, c);
  return c;
}

// K steps and a save under (cfg_a, groups_a); then a new trainer under (cfg_b, groups_b)
// resumes and trains `more` steps.
Curve interrupted(const config::Config& cfg_a, dist::ProcessGroups& groups_a, const config::Config& cfg_b,
                  dist::ProcessGroups& groups_b, int more) {
  Curve c;
  {
    train::Trainer t(cfg_a, groups_a);
    for (int i = 0; i < K; ++i) c.losses.push_back(t.train_step().loss);
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  test::world_groups().world->barrier();
  train::Trainer t(cfg_b, groups_b);
  EXPECT_EQ(t.step(), K);
  for (int i = 0; i < more; ++i) c.losses.push_back(t.train_step().loss);
  gather_params(t, c);
  return c;
}

void expect_bit_exact(const std::string& strategy, const std::vector<std::string>& extra = {}) {
  dist::ProcessGroups& world = test::world_groups();
  const std::string d1 = shared_scratch(strategy + "_a"), d2 = shared_scratch(strategy + "_b");
  std::vector<std::string> o = extra;
  o.push_back("fsdp.sharding_strategy=" + strategy);
  if (strategy.starts_with("HYBRID_SHARD"))
    o.push_back("fsdp.shard_group_size=" + std::to_string(world.world->size() >= 4 ? 2 : 1));
  const config::Config a = tiny(d1, o), b = tiny(d2, o);
  auto groups = dist::split_process_groups(world, train::shard_group_size(a));
  const Curve want = straight(a, groups, 2 * K);
  const Curve got = interrupted(b, groups, b, groups, K);
  for (int i = 0; i < 2 * K; ++i) EXPECT_EQ(got.losses[i], want.losses[i]) << strategy << " step " << i + 1;
  for (size_t u = 0; u < want.params.size(); ++u) {
    ASSERT_EQ(got.params[u].size(), want.params[u].size());
    EXPECT_EQ(std::memcmp(got.params[u].data(), want.params[u].data(), want.params[u].size() * sizeof(float)), 0)
        << strategy << " unit " << u << " differs after resume";
  }
}

TEST(CheckpointResume, FullShardIsBitExact) { expect_bit_exact("FULL_SHARD"); }
TEST(CheckpointResume, ShardGradOpIsBitExact) { expect_bit_exact("SHARD_GRAD_OP"); }
TEST(CheckpointResume, NoShardIsBitExact) { expect_bit_exact("NO_SHARD"); }
TEST(CheckpointResume, HybridShardIsBitExact) { expect_bit_exact("HYBRID_SHARD"); }
TEST(CheckpointResume, AsyncSaveWithAccumulationIsBitExact) {
  expect_bit_exact("FULL_SHARD", {"checkpoint.async=true", "train.grad_accum_steps=2"});
}

// SFT data packed into windows whose examples are kept apart (Note [Document masking] in
// fsdp/ops/attention.h): the resumed run reads the same windows and document starts.
TEST(CheckpointResume, PackedExamplesAreBitExact) {
  const std::string data = shared_scratch("packed_data");
  if (test::world_groups().world->rank() == 0) test::write_masked_corpus(data, 96, 17, 97, 4);
  test::world_groups().world->barrier();
  expect_bit_exact("FULL_SHARD", {"data.source=shards", "data.path=" + data, "data.packing=true",
                                  "train.grad_accum_steps=2", "train.eval_every=0"});
}

TEST(CheckpointResume, OnlyOneReplicaWritesEachShard) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const std::string dir = shared_scratch("replicas");
  const config::Config cfg = tiny(dir, {"fsdp.sharding_strategy=NO_SHARD"});
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  train::Trainer t(cfg, groups);
  t.train_step();
  const ckpt::SaveStats s = t.save_checkpoint();
  const ckpt::CheckpointReader r(s.path);
  EXPECT_EQ(r.manifest().world_size, n);
  EXPECT_EQ(r.manifest().files.size(), 1u) << "NO_SHARD replicas hold the same state: rank 0 alone writes it";
}

// Only rank 0 publishes (manifest, rename): when that fails, every rank's error names rank 0
// (rank 0's own says why), and no step_N appears.
TEST(CheckpointCommit, RankZeroPublishFailureNamesRankZeroEverywhere) {
  dist::ProcessGroups& world = test::world_groups();
  const std::string dir = shared_scratch("publish_fails");
  const config::Config cfg = tiny(dir, {"checkpoint.async=true"});
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  train::Trainer t(cfg, groups);
  t.train_step();
  t.save_checkpoint();  // asynchronous: the ranks' files are being written into step_1.tmp
  // A directory where rank 0's manifest.json must go: its rename over it fails.
  if (world.world->rank() == 0) fs::create_directories(fs::path(dir) / "checkpoints/step_1.tmp/manifest.json/x");
  world.world->barrier();
  std::string msg;
  try {
    t.finish_checkpoint();
  } catch (const Error& e) {
    msg = e.what();
  }
  if (world.world->rank() == 0) {
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find("failed on rank(s) 0 "), std::string::npos) << msg;
  }
  world.world->barrier();
  EXPECT_FALSE(fs::exists(fs::path(dir) / "checkpoints/step_1"));
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

// The keys of `strategy`, the hybrid ones in shard groups of 2 (of 1 below 4 ranks).
std::vector<std::string> strategy_keys(const std::string& strategy, int n) {
  std::vector<std::string> o = {"fsdp.sharding_strategy=" + strategy};
  if (strategy.starts_with("HYBRID_SHARD")) o.push_back("fsdp.shard_group_size=" + std::to_string(n >= 4 ? 2 : 1));
  return o;
}

// Saved under `from` (FULL_SHARD on the whole world, unless named), resumed under `strategy`
// (another shard layout over the same ranks), or by every rank alone as a one-rank job
// (N -> 1, with the world's micro-batches as accumulation steps so the global batch is the
// same). The manifest names the strategy it was saved under.
void expect_resharded(const std::string& strategy, bool alone, const std::string& from = "FULL_SHARD") {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const std::string d1 = shared_scratch("reshard_a_" + from + strategy),
                    d2 = shared_scratch("reshard_b_" + from + strategy);
  const config::Config a = tiny(d1, strategy_keys(from, n)), b = tiny(d2, strategy_keys(from, n));
  auto saved = dist::split_process_groups(world, train::shard_group_size(a));
  const Curve want = straight(a, saved, 2 * K);
  std::vector<std::string> o = strategy_keys(strategy, n);
  if (alone) {
    o.push_back("train.grad_accum_steps=" + std::to_string(n));
    // Every rank reads the checkpoint on its own: give each its own copy of the directory
    // setting but the same files (read-only).
  }
  config::Config c = tiny(d2, o);
  auto local = dist::local_process_groups();
  auto other = dist::split_process_groups(world, train::shard_group_size(c));
  Curve got;
  if (!alone) {
    got = interrupted(b, saved, c, other, K);
  } else {
    {
      train::Trainer t(b, saved);
      for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
      t.save_checkpoint();
    }
    world.world->barrier();
    train::Trainer t(c, local);
    EXPECT_EQ(t.step(), K);
    for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
    gather_params(t, got);
    world.world->barrier();  // nobody deletes the directory while another rank reads it
  }
  for (int i = 0; i < K; ++i) EXPECT_EQ(got.losses[i], want.losses[i]) << "before the save, step " << i + 1;
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(d2 + "/checkpoints/step_" + std::to_string(K) + "/manifest.json"));
  EXPECT_EQ(manifest.at("strategy").get<std::string>(), from);
  for (int i = K; i < 2 * K; ++i)
    EXPECT_LT(rel(got.losses[i], want.losses[i]), 1e-5) << strategy << " step " << i + 1 << ": " << got.losses[i]
                                                         << " vs " << want.losses[i];
  for (size_t u = 0; u < want.params.size(); ++u) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.params[u].size(); ++i) {
      num += std::pow(double(got.params[u][i]) - want.params[u][i], 2);
      den += std::pow(double(want.params[u][i]), 2);
    }
    EXPECT_LT(std::sqrt(num / den), 5e-5) << strategy << " unit " << u;  // see test_fsdp.cpp on this bound
  }
}

TEST(CheckpointReshard, FullShardToNoShard) { expect_resharded("NO_SHARD", false); }
TEST(CheckpointReshard, FullShardToHybridShard) { expect_resharded("HYBRID_SHARD", false); }
// PyTorch's _HYBRID_SHARD_ZERO2 under its name here: saved, named in the manifest, read back
// and loaded at another layout.
TEST(CheckpointReshard, HybridShardZero2ToFullShard) { expect_resharded("FULL_SHARD", false, "HYBRID_SHARD_ZERO2"); }
TEST(CheckpointReshard, EveryRankAloneLoadsTheWholeCheckpoint) { expect_resharded("FULL_SHARD", true); }

}  // namespace
}  // namespace fsdp

namespace fsdp {
namespace {

// model.init_from under FULL_SHARD: every rank reads only its own slice of the Hugging Face
// files into its shard (load_hf_unit with a begin offset), and the shards assemble into
// exactly the single-process import.
TEST(InitFromSharded, ShardsAssembleIntoTheSingleProcessImport) {
  dist::ProcessGroups& world = test::world_groups();
  const std::string hf = std::string(FSDP_SOURCE_DIR) + "/tests/golden/llama_gqa_tiny";
  const std::vector<std::string> o = {"model.init_from=" + hf, "checkpoint.resume=none", "train.seq_len=13",
                                      "train.micro_batch_size=1", "logging.metrics=false"};
  const config::Config cfg = config::load_config_string("data:\n  source: synthetic\n", "test", o);
  auto sharded = dist::split_process_groups(world, 0);
  train::Trainer t(cfg, sharded);
  auto local = dist::local_process_groups();
  train::Trainer whole(cfg, local);
  for (int u = 0; u < t.engine().num_units(); ++u) {
    EXPECT_LE(t.engine().master(u).numel(), (whole.engine().master(u).numel() + world.world->size() - 1) /
                                                 world.world->size())
        << "rank holds more than its shard of unit " << u;
    const Tensor full = t.engine().gather_full(u);
    const Tensor& want = whole.engine().master(u);
    EXPECT_EQ(std::memcmp(full.data<float>(), want.data<float>(), size_t(full.numel()) * sizeof(float)), 0)
        << "unit " << u;
  }
}

}  // namespace
}  // namespace fsdp
