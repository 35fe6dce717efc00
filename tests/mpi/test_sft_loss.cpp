// The token-weighted loss (Note [Token-weighted loss], train/trainer.h) under mpirun with 1, 2
// and 4 ranks: on SFT-like data whose examples train very different numbers of tokens (one
// example per row, padded), the same global batch of 4 rows split as 1 rank x micro 4,
// N ranks x micro 4/N, and 1 rank x micro 1 x accumulation 4 gives the same loss at every
// step, within 1e-5 relative: ranks and micro-batches only change the order of the sums.
// A per-micro-batch mean averaged over micro-batches (the 2024 gradient-accumulation bug)
// differs here by several percent from step 1 on. With packing (examples packed into windows,
// kept apart by document masking) the loss and every parameter's gradient of a step are the
// same for micro 8 x 1 rank, micro 2 x accumulation 4, and micro 1 x N ranks x accumulation
// 8 / N, within 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fsdp/fsdp/shard_math.h"
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

struct Step {
  double loss = 0;
  int64_t trained = 0;
  std::vector<Tensor> grads;  // every unit's whole gradient, on every rank
};

// One optimizer step; the gradient shards gathered into whole units over the shard group.
Step one_step(const config::Config& cfg, dist::ProcessGroups& groups) {
  train::Trainer t(cfg, groups);
  const obs::StepMetrics m = t.train_step();
  Step s{m.loss, m.trained_tokens, {}};
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const ShardRange& r = t.engine().shard_range(u);
    const int64_t numel = t.model().units()[size_t(u)].numel;
    Tensor full = Tensor::zeros({r.size * groups.shard->size()}, DType::F32);
    full.narrow(0, r.begin, r.size).copy_(t.engine().grad_shard(u));
    groups.shard->wait(groups.shard->all_reduce(full));
    s.grads.push_back(full.narrow(0, 0, numel).clone());
  }
  return s;
}

void expect_same_step(const Step& got, const Step& want, const std::string& what) {
  EXPECT_EQ(got.trained, want.trained) << what;
  EXPECT_LT(std::abs(got.loss - want.loss) / want.loss, 1e-6) << what << ": " << got.loss << " vs " << want.loss;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  // float32 gradients summed over rows, micro-batches and ranks in other orders: ~1e-7.
  for (size_t u = 0; u < want.grads.size(); ++u)
    EXPECT_LT(test::rel_norm_error(got.grads[u], want.grads[u]), 1e-6) << what << ": unit " << u;
}

TEST(TokenWeightedLoss, PackedStepIsTheSameForAnySplit) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const std::string dir = test::shared_scratch(*world.world, "fsdp_sft_packed_split");
  if (world.world->rank() == 0) test::write_masked_corpus(dir, 96, 33, 1024, 9);
  world.world->barrier();
  const std::vector<std::string> packed = {"data.packing=true", "train.grad_clip=0"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), packed.begin(), packed.end());
    return sft_config(dir, o);
  };
  auto local = dist::local_process_groups();
  const Step eight = one_step(with({"train.micro_batch_size=8"}), local);
  expect_same_step(one_step(with({"train.micro_batch_size=2", "train.grad_accum_steps=4"}), local), eight,
                   "1 rank x micro 2 x accum 4");
  if (n > 1 && 8 % n == 0) {
    const config::Config cfg = with({"train.micro_batch_size=1", "train.grad_accum_steps=" + std::to_string(8 / n)});
    auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
    expect_same_step(one_step(cfg, groups), eight,
                     std::to_string(n) + " ranks x micro 1 x accum " + std::to_string(8 / n));
  }
  // Uneven: the windows train far fewer targets than they hold.
  EXPECT_LT(eight.trained, 8 * 32 * 3 / 4);
  EXPECT_GT(eight.loss, 0.0);
}

}  // namespace
}  // namespace fsdp
