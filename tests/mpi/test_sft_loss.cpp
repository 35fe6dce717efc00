// The token-weighted loss (Note [Token-weighted loss], train/trainer.h) under mpirun with 1, 2
// and 4 ranks: on SFT-like data whose examples train very different numbers of tokens (one
// example per row, padded), the same global batch of 4 rows split as 1 rank x micro 4,
// N ranks x micro 4/N, and 1 rank x micro 1 x accumulation 4 gives the same loss at every
// step, within 1e-5 relative: ranks and micro-batches only change the order of the sums.
// A per-micro-batch mean averaged over micro-batches (the 2024 gradient-accumulation bug)
// differs here by several percent from step 1 on.
#include <gtest/gtest.h>

#include <cmath>

#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "../common/distributed_train_checks.h"
#include "../common/masked_corpus.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 4;
constexpr double kTolerance = 1e-5;

config::Config sft_config(const std::string& data, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny",   "model.num_layers=2",      "train.seq_len=32",
                                "optim.lr=3e-3",       "optim.warmup_steps=1",    "train.max_steps=4",
                                "logging.metrics=false", "checkpoint.resume=none", "data.source=shards",
                                "data.path=" + data,   "data.packing=false",      "fsdp.sharding_strategy=FULL_SHARD"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

struct Curve {
  std::vector<double> losses;
  std::vector<int64_t> trained;
};

Curve run(const config::Config& cfg, dist::ProcessGroups& groups) {
  train::Trainer t(cfg, groups);
  Curve c;
  for (int i = 0; i < kSteps; ++i) {
    const obs::StepMetrics m = t.train_step();
    c.losses.push_back(m.loss);
    c.trained.push_back(m.trained_tokens);
  }
  return c;
}

void expect_same(const Curve& got, const Curve& want, const std::string& what) {
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(got.trained[size_t(i)], want.trained[size_t(i)]) << what << " step " << i + 1;
    EXPECT_LT(std::abs(got.losses[size_t(i)] - want.losses[size_t(i)]) / want.losses[size_t(i)], kTolerance)
        << what << " step " << i + 1 << ": " << got.losses[size_t(i)] << " vs " << want.losses[size_t(i)];
  }
}

TEST(TokenWeightedLoss, SameLossForAnyMicroBatchSplitOrWorldSize) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const std::string dir = test::shared_scratch(*world.world, "fsdp_sft_loss");
  if (world.world->rank() == 0) test::write_masked_corpus(dir, 64, 33, 1024, 7);
  world.world->barrier();
  auto local = dist::local_process_groups();
  const Curve one_by_four = run(sft_config(dir, {"train.micro_batch_size=4"}), local);
  const Curve accumulated = run(sft_config(dir, {"train.micro_batch_size=1", "train.grad_accum_steps=4"}), local);
  expect_same(accumulated, one_by_four, "1 rank x micro 1 x accum 4");
  const config::Config cfg = sft_config(dir, {"train.micro_batch_size=" + std::to_string(4 / n)});
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  expect_same(run(cfg, groups), one_by_four, std::to_string(n) + " ranks x micro " + std::to_string(4 / n));
  // Not every target trains, or the check above would not tell the weighting apart.
  EXPECT_LT(one_by_four.trained[0], 4 * 32);
}

}  // namespace
}  // namespace fsdp
