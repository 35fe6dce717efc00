// Auxiliary-loss-free balancing (model/router_bias.h) on any world size: the biases come
// from each step's global expert counts (all-reduced over every rank), so N ranks of FULL_SHARD
// hold the very biases one process holds after training the same global batch, and train
// the same losses (within FSDP's 1e-5, test_fsdp.cpp's bound: ranks sum gradients in another
// order). The counts are integers, so equal routing gives equal biases bit for bit.
#include <gtest/gtest.h>

#include <cmath>

#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 8;

config::Config tiny_moe(int accum, const std::string& strategy) {
  const std::vector<std::string> o = {
      "model.preset=tiny",         "model.num_layers=2",          "train.seq_len=32",
      "train.micro_batch_size=2",  "optim.lr=3e-3",               "optim.warmup_steps=3",
      "train.max_steps=8",         "logging.metrics=false",       "checkpoint.resume=none",
      "model.num_experts=4",       "model.experts_per_token=2",   "model.router_aux_loss_coef=0.02",
      "model.router_bias_update_rate=0.01", "train.grad_accum_steps=" + std::to_string(accum),
      "fsdp.sharding_strategy=" + strategy};
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

struct BiasRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> bias;
};

BiasRun train(const config::Config& cfg, dist::ProcessGroups& groups) {
  train::Trainer t(cfg, groups);
  BiasRun r;
  for (int i = 0; i < kSteps; ++i) r.losses.push_back(t.train_step().loss);
  r.bias = t.model().router_bias()->values();
  return r;
}

TEST(RouterBias, AnyWorldSizeTrainsTheBiasesAndLossesOfOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const config::Config cfg = tiny_moe(1, "FULL_SHARD");
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  const BiasRun got = train(cfg, groups);
  auto local = dist::local_process_groups();
  const BiasRun want = train(tiny_moe(n, "NO_SHARD"), local);  // the world's micro-batches, accumulated
  EXPECT_EQ(got.bias, want.bias);
  float largest = 0;
  for (const auto& row : want.bias)
    for (const float b : row) largest = std::max(largest, std::abs(b));
  EXPECT_GT(largest, 0.0f) << "the biases never moved";
  for (int i = 0; i < kSteps; ++i)
    EXPECT_LT(std::abs(got.losses[size_t(i)] - want.losses[size_t(i)]) / want.losses[size_t(i)], 1e-5)
        << "step " << i + 1;
}

}  // namespace
}  // namespace fsdp
