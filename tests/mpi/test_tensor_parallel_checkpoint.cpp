// Checkpoints at any layout (issue 27's "Done means"), under mpiexec with 2 and 4 ranks:
//  - a round trip through every layout the world holds, (T=2, S=2) -> (T=1, S=4) ->
//    (T=4, S=1) -> one process on 4 ranks ((T=2, S=1) -> (T=1, S=2) -> one process on
//    2), each resuming the last one's checkpoint (weights, AdamW moments, step, loader
//    position) and training K more steps: the losses equal the uninterrupted run's within
//    1e-5 relative (the global batch is the same at every layout, so is the data);
//  - the same layout resumes bit for bit (losses and every weight);
//  - `export` of a tensor-parallel run's checkpoint writes the same Hugging Face folder, to
//    the bit, as that state saved by one process (read back through the other layout).
// Manifest and reader arithmetic: tests/cpu/test_checkpoint.cpp's TensorParallel cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/train/checkpoint_export.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
constexpr int K = 3;
constexpr int kGlobalBatch = 8;  // sequences per step at every layout

struct Layout {
  int tensor, shard;  // FULL_SHARD over `shard` data-parallel ranks; {0, 0}: one process
  bool one_process() const { return tensor == 0; }
};

std::vector<std::string> keys(const Layout& l, const std::string& dir, const std::string& resume) {
  const int data_ranks = l.one_process() ? 1 : l.shard;
  std::vector<std::string> o = {"model.preset=tiny",         "model.num_layers=2",        "model.vocab_size=128",
                                "model.hidden_size=64",      "model.num_heads=8",         "model.num_kv_heads=4",
                                "model.intermediate_size=96", "train.seq_len=16",         "train.micro_batch_size=2",
                                "optim.lr=3e-3",             "optim.warmup_steps=2",      "train.max_steps=100",
                                "logging.metrics=false",     "checkpoint.keep_last=10",   "run.dir=" + dir,
                                "checkpoint.resume=" + resume,
                                "train.grad_accum_steps=" + std::to_string(kGlobalBatch / 2 / data_ranks)};
  if (!l.one_process()) {
    o.push_back("parallel.tensor=" + std::to_string(l.tensor));
  } else {
    o.push_back("fsdp.sharding_strategy=NO_SHARD");
  }
  return o;
}

// `steps` steps at layout l (resuming `resume`, or none), then a checkpoint; the losses.
std::vector<double> train_and_save(const Layout& l, const std::string& dir, const std::string& resume, int steps,
                                   bool save = true) {
  dist::ProcessGroups& world = test::world_groups();
  const config::Config cfg = config::load_config_string("data:\n  source: synthetic\n", "test", keys(l, dir, resume));
  dist::ProcessGroups groups = l.one_process() ? dist::local_process_groups()
                                               : dist::split_process_groups(world, train::mesh_spec(cfg));
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

bool fits(const Layout& l) {
  const int n = test::world_groups().world->size();
  return l.one_process() || l.tensor * l.shard == n;
}

TEST(TensorParallelCheckpoint, RoundTripThroughEveryLayoutContinuesTheCurve) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  const std::vector<Layout> trip = n >= 4 ? std::vector<Layout>{{2, 2}, {1, 4}, {4, 1}, {0, 0}}
                                          : std::vector<Layout>{{2, 1}, {1, 2}, {0, 0}};
  const std::string ref = test::shared_scratch(*world.world, "fsdp_tp_ckpt_ref");
  // One process on every rank; its checkpoint is not written (every rank would write it).
  const std::vector<double> want = train_and_save({0, 0}, ref, "none", K * int(trip.size()), /*save=*/false);
  const std::string dir = test::shared_scratch(*world.world, "fsdp_tp_ckpt_trip");
  std::vector<double> got;
  for (size_t i = 0; i < trip.size(); ++i) {
    const std::string resume = i == 0 ? "none" : test::checkpoint_step_dir(dir, K * int(i));
    // The last leg (one process on every rank) saves nothing.
    const std::vector<double> leg = train_and_save(trip[i], dir, resume, K, i + 1 < trip.size());
    got.insert(got.end(), leg.begin(), leg.end());
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LT(std::abs(got[i] - want[i]) / want[i], 1e-5) << "step " << i + 1 << ": " << got[i] << " vs " << want[i];
}

TEST(TensorParallelCheckpoint, TheSameLayoutResumesBitExactly) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  const Layout l{2, n / 2};
  const std::string a = test::shared_scratch(*world.world, "fsdp_tp_ckpt_straight");
  const std::string b = test::shared_scratch(*world.world, "fsdp_tp_ckpt_resumed");
  const std::vector<double> want = train_and_save(l, a, "none", 2 * K);
  std::vector<double> got = train_and_save(l, b, "none", K);
  const std::vector<double> more = train_and_save(l, b, test::checkpoint_step_dir(b, K), K);
  got.insert(got.end(), more.begin(), more.end());
  for (int i = 0; i < 2 * K; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << "step " << i + 1;
  // Every rank file of the final checkpoints (every tensor rank's slices), to the bit.
  if (world.world->rank() == 0) {
    const ckpt::CheckpointReader ra(test::checkpoint_step_dir(a, 2 * K));
    EXPECT_EQ(ra.manifest().tensor_parallel, 2);
    EXPECT_EQ(ra.manifest().format_version, 2);
    EXPECT_EQ(int(ra.manifest().files.size()), n);
    const auto fa = test::folder_bytes(test::checkpoint_step_dir(a, 2 * K));
    const auto fb = test::folder_bytes(test::checkpoint_step_dir(b, 2 * K));
    for (const auto& [name, bytes] : fa)
      if (name.starts_with("rank_")) EXPECT_TRUE(fb.count(name) && fb.at(name) == bytes) << name << " differs";
  }
  world.world->barrier();
}

TEST(TensorParallelCheckpoint, ExportOfATensorParallelRunIsOneProcesss) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n < 2) GTEST_SKIP() << "tensor parallelism needs 2 ranks";
  const std::string tp = test::shared_scratch(*world.world, "fsdp_tp_export_tp");
  train_and_save({n, 1}, tp, "none", K);
  // The same state through one process: resumed at T=1 (every tensor slice read back into
  // the whole parameters) and saved again by rank 0 alone, as one process would.
  const std::string one = test::shared_scratch(*world.world, "fsdp_tp_export_one");
  // Rank 0 alone; an exception becomes a failure so that every rank still meets the barrier.
  if (world.world->rank() == 0) {
    try {
      auto local = dist::local_process_groups();
      const config::Config cfg =
          config::load_config_string("data:\n  source: synthetic\n", "test",
                                     keys({0, 0}, one, test::checkpoint_step_dir(tp, K)));
      train::Trainer t(cfg, local);
      EXPECT_EQ(t.step(), K);
      t.save_checkpoint();
      t.finish_checkpoint();
      test::expect_exports_equal(test::checkpoint_step_dir(tp, K), test::checkpoint_step_dir(one, K), one,
                                 "tensor-parallel");
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  world.world->barrier();
}

}  // namespace
}  // namespace fsdp
