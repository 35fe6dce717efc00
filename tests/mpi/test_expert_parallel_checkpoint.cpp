// Checkpoints under expert parallelism (issue 28's "Done means"), under mpiexec with 2 and
// 4 ranks. A checkpoint saved at E > 1 is one process's layout (manifest.h, format version
// 3: every rank's shards of its blocks and experts stored as runs of the whole units), so:
//  - a round trip E=2 x FULL_SHARD 2 -> E=4 -> E=2 x T=2 -> E=1 over 4 ranks -> E=2 x
//    HYBRID_SHARD 2x2 -> one process (on 2 ranks: E=2 -> E=1 over 2 -> one process), each
//    leg resuming the last one's checkpoint (weights, AdamW moments, step, loader position,
//    routing biases) and training K more steps, continues the uninterrupted run's losses
//    within 1e-5 (E=2 x T=2, under selective checkpointing, stores each tensor rank's slices
//    of one process's units: format version 3 with tensor_parallel 2, read at E=1 x T=1 by
//    the next leg);
//  - the same layout resumes bit for bit (losses, and every rank file of the final
//    checkpoint);
//  - `export` of an expert-parallel run's checkpoint (E = the world; on 4 ranks E=2 x T=2
//    too, under full checkpointing) writes the same Hugging Face folder, to the bit, as that
//    state saved by one process.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/train/checkpoint_export.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int K = 3;
constexpr int kGlobalBatch = 8;  // sequences per step at every layout

struct Layout {
  int expert;        // 0: one process
  int data_ranks;    // the data-parallel ranks (the world / parallel.tensor, or 1)
  std::vector<std::string> fsdp;  // FSDP keys beside the default FULL_SHARD (and parallel.tensor, checkpointing)
};

std::vector<std::string> keys(const Layout& l, const std::string& dir, const std::string& resume) {
  std::vector<std::string> o = {
      "model.preset=tiny_moe",      "model.num_layers=2",          "model.vocab_size=128",
      "model.hidden_size=64",       "model.num_heads=4",           "model.num_kv_heads=2",
      "model.intermediate_size=32", "model.router_z_loss_coef=0.001", "model.router_bias_update_rate=0.01",
      "train.seq_len=16",           "train.micro_batch_size=2",    "optim.lr=3e-3",
      "optim.warmup_steps=2",       "train.max_steps=100",         "logging.metrics=false",
      "checkpoint.keep_last=10",    "run.dir=" + dir,              "checkpoint.resume=" + resume,
      "train.grad_accum_steps=" + std::to_string(kGlobalBatch / 2 / l.data_ranks)};
  if (l.expert == 0) {
    o.push_back("fsdp.sharding_strategy=NO_SHARD");
  } else {
    o.push_back("parallel.expert=" + std::to_string(l.expert));
  }
  o.insert(o.end(), l.fsdp.begin(), l.fsdp.end());
  return o;
}

// `steps` steps at layout l (resuming `resume`, or none), then (with `save`) a checkpoint.
std::vector<double> train_and_save(const Layout& l, const std::string& dir, const std::string& resume, int steps,
                                   bool save = true) {
  dist::ProcessGroups& world = test::world_groups();
  const config::Config cfg = config::load_config_string("data:\n  source: synthetic\n", "test", keys(l, dir, resume));
  dist::ProcessGroups groups =
      l.expert == 0 ? dist::local_process_groups() : dist::split_process_groups(world, train::mesh_spec(cfg));
  std::vector<double> losses;
  {
    train::Trainer t(cfg, groups);
    for (int i = 0; i < steps; ++i) losses.push_back(t.train_step().loss);
    if (save) {
      t.save_checkpoint();
      t.finish_checkpoint();
    }
  }
  world.world->barrier();
  return losses;
}

TEST(ExpertParallelCheckpoint, RoundTripThroughEveryLayoutContinuesTheCurve) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  const std::vector<Layout> trip =
      n == 4 ? std::vector<Layout>{{2, 4, {}},
                                   {4, 4, {}},
                                   {2, 2, {"parallel.tensor=2", "train.activation_checkpointing=selective"}},
                                   {1, 4, {}},
                                   {2, 4, {"fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"}},
                                   {0, 1, {}}}
             : std::vector<Layout>{{2, 2, {}}, {1, 2, {}}, {0, 1, {}}};
  const std::string ref = test::shared_scratch(*world.world, "fsdp_ep_ckpt_ref");
  // One process on every rank; its checkpoint is not written (every rank would write it).
  const std::vector<double> want = train_and_save({0, 1, {}}, ref, "none", K * int(trip.size()), /*save=*/false);
  const std::string dir = test::shared_scratch(*world.world, "fsdp_ep_ckpt_trip");
  std::vector<double> got;
  for (size_t i = 0; i < trip.size(); ++i) {
    const std::string resume = i == 0 ? "none" : test::checkpoint_step_dir(dir, K * int(i));
    const std::vector<double> leg = train_and_save(trip[i], dir, resume, K, i + 1 < trip.size());
    got.insert(got.end(), leg.begin(), leg.end());
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LT(std::abs(got[i] - want[i]) / want[i], 1e-5) << "step " << i + 1 << ": " << got[i] << " vs " << want[i];
}

TEST(ExpertParallelCheckpoint, TheSameLayoutResumesBitExactly) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  const Layout l{2, n, {}};
  const std::string a = test::shared_scratch(*world.world, "fsdp_ep_ckpt_straight");
  const std::string b = test::shared_scratch(*world.world, "fsdp_ep_ckpt_resumed");
  const std::vector<double> want = train_and_save(l, a, "none", 2 * K);
  std::vector<double> got = train_and_save(l, b, "none", K);
  const std::vector<double> more = train_and_save(l, b, test::checkpoint_step_dir(b, K), K);
  got.insert(got.end(), more.begin(), more.end());
  for (int i = 0; i < 2 * K; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << "step " << i + 1;
  if (world.world->rank() == 0) {
    const ckpt::CheckpointReader ra(test::checkpoint_step_dir(a, 2 * K));
    EXPECT_EQ(ra.manifest().format_version, 3);
    EXPECT_EQ(int(ra.manifest().files.size()), n);
    EXPECT_EQ(ra.manifest().units.size(), size_t(2 + 2)) << "one process's units: embedding, 2 blocks, head";
    const auto fa = test::folder_bytes(test::checkpoint_step_dir(a, 2 * K));
    const auto fb = test::folder_bytes(test::checkpoint_step_dir(b, 2 * K));
    for (const auto& [name, bytes] : fa)
      if (name.starts_with("rank_")) EXPECT_TRUE(fb.count(name) && fb.at(name) == bytes) << name << " differs";
  }
  world.world->barrier();
}

TEST(ExpertParallelCheckpoint, ExportOfAnExpertParallelRunIsOneProcesss) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  std::vector<std::pair<Layout, std::string>> layouts = {{{n, n, {}}, "expert-parallel"}};
  if (n == 4) layouts.push_back({{2, 2, {"parallel.tensor=2", "train.activation_checkpointing=full"}}, "E=2 x T=2"});
  for (const auto& [layout, what] : layouts) {
    const std::string ep = test::shared_scratch(*world.world, "fsdp_ep_export_ep");
    train_and_save(layout, ep, "none", K);
    const std::string one = test::shared_scratch(*world.world, "fsdp_ep_export_one");
    // Rank 0 alone; an exception becomes a failure so that every rank still meets the barrier.
    if (world.world->rank() == 0) {
      try {
        // One process's units (each tensor rank's slices of them under parallel.tensor).
        const ckpt::CheckpointReader saved(test::checkpoint_step_dir(ep, K));
        EXPECT_EQ(saved.manifest().format_version, 3) << what;
        EXPECT_EQ(saved.manifest().tensor_parallel, n / layout.data_ranks) << what;
        EXPECT_EQ(saved.manifest().units.size(), size_t(2 + 2)) << what << ": embedding, 2 blocks, head";
        auto local = dist::local_process_groups();
        const config::Config cfg = config::load_config_string("data:\n  source: synthetic\n", "test",
                                                              keys({0, 1, {}}, one, test::checkpoint_step_dir(ep, K)));
        train::Trainer t(cfg, local);
        EXPECT_EQ(t.step(), K);
        t.save_checkpoint();
        t.finish_checkpoint();
        test::expect_exports_equal(test::checkpoint_step_dir(ep, K), test::checkpoint_step_dir(one, K), one, what);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
    world.world->barrier();
  }
}

}  // namespace
}  // namespace fsdp
