// Auxiliary-loss-free load balancing (model/router_bias.h): the update rule on given
// counts, the router op choosing by probability + bias while its weights stay the
// unbiased probabilities (a hand-computed case; a zero bias is the plain routing, bit for
// bit), the trainer applying the rule to each step's global counts, checkpoint resume
// with the biases bit-exact, and the config key refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/ops/moe_router.h"
#include "fsdp/train/trainer.h"
#include "../common/local_trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

using test::ckpt_config;
using test::LocalTrainer;
using test::scratch;

// ---- The rule ---------------------------------------------------------------------------

TEST(RouterBiasUpdate, MovesEachExpertBySignOfMeanMinusLoadCentred) {
  const double r = 0.01;
  // Mean 4: expert 0 is over, 1..3 under: d = r (-1, 1, 1, 1), mean(d) = r/2.
  std::vector<float> b = {0, 0, 0, 0};
  model::update_router_bias(b, std::vector<int64_t>{10, 2, 2, 2}, r);
  const std::vector<double> want = {-1.5 * r, 0.5 * r, 0.5 * r, 0.5 * r};
  for (size_t e = 0; e < b.size(); ++e) EXPECT_EQ(b[e], float(want[e])) << e;
  // An expert exactly at the mean does not move (its sign is 0); the sum stays 0.
  std::vector<float> c = {0.25f, -0.25f, 0, 0};
  model::update_router_bias(c, std::vector<int64_t>{6, 4, 2, 4}, r);
  EXPECT_EQ(c[0], float(0.25 - r));
  EXPECT_EQ(c[1], -0.25f);
  EXPECT_EQ(c[2], float(0.0 + r));
  EXPECT_EQ(c[3], 0.0f);
  // Balanced, or nothing routed: nothing moves.
  std::vector<float> d = {0.5f, -0.5f, 0, 0};
  model::update_router_bias(d, std::vector<int64_t>{3, 3, 3, 3}, r);
  model::update_router_bias(d, std::vector<int64_t>{0, 0, 0, 0}, r);
  EXPECT_EQ(d, (std::vector<float>{0.5f, -0.5f, 0, 0}));
}

TEST(RouterBiasUpdate, RefusesMismatchedCountsAndBadRates) {
  std::vector<float> b = {0, 0};
  EXPECT_ERROR_MENTIONS(model::update_router_bias(b, std::vector<int64_t>{1, 2, 3}, 0.1), "2 biases for 3 counts");
  EXPECT_ERROR_MENTIONS(model::update_router_bias(b, std::vector<int64_t>{1, 2}, -1), "rate");
  model::RouterBias bias(2, 4, Device::cpu());
  EXPECT_FALSE(bias.enabled());
  EXPECT_FALSE(bias.layer(0).defined());
  EXPECT_ERROR_MENTIONS(bias.set({{0, 0, 0, 0}}), "1 layers, but the model has 2");
  EXPECT_ERROR_MENTIONS(bias.set({{0, 0, 0, 0}, {0, 0, NAN, 0}}), "layer 1 expert 2");
  bias.set({{0, 1, 2, 3}, {-1, -2, -3, -4}});
  EXPECT_EQ(bias.layer(1).get({2}), -3.0);
  EXPECT_EQ(model::router_bias_max_abs(bias.values()), 4.0f);
}

// ---- The router op ----------------------------------------------------------------------

struct Routed {
  Tensor probs, lse, expert, weight;
};

Routed route(const Tensor& logits, int64_t k, const Tensor& bias) {
  const int64_t n = logits.size(0), e = logits.size(1);
  Routed r{Tensor::empty({n, e}, DType::F32), Tensor::empty({n}, DType::F32), Tensor::empty({n, k}, DType::I32),
           Tensor::empty({n, k}, DType::F32)};
  moe_router_forward(logits, k, r.probs, r.lse, r.expert, r.weight, bias);
  return r;
}

// Probabilities 0.4, 0.3, 0.2, 0.1 (logits = their logs); top-2 picks 0 and 1 with weights
// 4/7 and 3/7. The bias (-0.3, 0, 0.15, 0) makes the scores 0.1, 0.3, 0.35, 0.1: experts 2
// then 1, weighted by their own probabilities 0.2 and 0.3 renormalised: 0.4 and 0.6.
TEST(RouterBiasOp, BiasChoosesTheExpertsWhileWeightsStayUnbiased) {
  const std::vector<double> p = {0.4, 0.3, 0.2, 0.1};
  const Tensor logits = test::filled(DType::F32, 4, [&](int64_t i) { return std::log(p[size_t(i)]); }).reshape({1, 4});
  const Routed plain = route(logits, 2, Tensor());
  EXPECT_EQ(plain.expert.get({0, 0}), 0);
  EXPECT_EQ(plain.expert.get({0, 1}), 1);
  EXPECT_NEAR(plain.weight.get({0, 0}), 4.0 / 7.0, 1e-6);
  EXPECT_NEAR(plain.weight.get({0, 1}), 3.0 / 7.0, 1e-6);
  const Routed biased = route(logits, 2, test::filled(DType::F32, 4, [](int64_t i) {
                                return std::vector<double>{-0.3, 0, 0.15, 0}[size_t(i)];
                              }));
  EXPECT_EQ(biased.expert.get({0, 0}), 2);
  EXPECT_EQ(biased.expert.get({0, 1}), 1);
  EXPECT_NEAR(biased.weight.get({0, 0}), 0.4, 1e-6);
  EXPECT_NEAR(biased.weight.get({0, 1}), 0.6, 1e-6);
  // The probabilities and logsumexp do not see the bias.
  EXPECT_TRUE(test::same_bits(biased.probs, plain.probs));
  EXPECT_TRUE(test::same_bits(biased.lse, plain.lse));
}

TEST(RouterBiasOp, ZeroBiasIsThePlainRoutingBitForBit) {
  const Tensor logits = test::random_tensor({257, 8}, DType::F32, 5, -3, 3);
  const Routed plain = route(logits, 2, Tensor());
  const Routed zero = route(logits, 2, Tensor::zeros({8}, DType::F32));
  EXPECT_TRUE(test::same_bits(zero.expert, plain.expert));
  EXPECT_TRUE(test::same_bits(zero.weight, plain.weight));
  EXPECT_TRUE(test::same_bits(zero.probs, plain.probs));
}

TEST(RouterBiasOp, RefusesABiasOfTheWrongShapeOrDtype) {
  const Tensor logits = test::random_tensor({3, 8}, DType::F32, 6);
  EXPECT_ERROR_MENTIONS(route(logits, 2, Tensor::zeros({7}, DType::F32)), "bias");
  EXPECT_ERROR_MENTIONS(route(logits, 2, Tensor::zeros({8}, DType::F64)), "bias");
}

// ---- The trainer ------------------------------------------------------------------------

const std::vector<std::string> kMoe = {"model.num_experts=4", "model.experts_per_token=2",
                                       "model.router_aux_loss_coef=0.02", "model.router_bias_update_rate=0.01"};

// The biases after each step are the rule applied to that step's counts (the metrics'),
// starting from zero; and they change the routing (the run differs from one without them).
TEST(RouterBiasTraining, EachStepAppliesTheRuleToItsGlobalCounts) {
  LocalTrainer t(ckpt_config(scratch("bias_rule"), kMoe));
  std::vector<std::vector<float>> want(2, std::vector<float>(4, 0.0f));
  std::vector<double> losses;
  for (int s = 0; s < 4; ++s) {
    const obs::StepMetrics m = t->train_step();
    losses.push_back(m.loss);
    for (size_t l = 0; l < want.size(); ++l) model::update_router_bias(want[l], m.expert_load[l], 0.01);
    ASSERT_EQ(t->model().router_bias()->values(), want) << "step " << s + 1;
  }
  EXPECT_GT(model::router_bias_max_abs(want), 0.0f);
  std::vector<std::string> off = kMoe;
  off.back() = "model.router_bias_update_rate=0";
  LocalTrainer plain(ckpt_config(scratch("bias_off"), off));
  EXPECT_FALSE(plain->model().router_bias()->enabled());
  std::vector<double> plain_losses;
  for (int s = 0; s < 4; ++s) plain_losses.push_back(plain->train_step().loss);
  EXPECT_EQ(plain_losses[0], losses[0]);  // step 1 routes with zero biases: the same bits
  EXPECT_NE(plain_losses, losses);
}

// Train 8 steps straight; train 4, save, resume, train 4: the same losses and biases, bit
// for bit (the biases travel in the manifest).
TEST(RouterBiasTraining, ResumeIsBitExactWithTheBiases) {
  const std::string d1 = scratch("bias_straight"), d2 = scratch("bias_resumed");
  std::vector<double> straight, resumed;
  std::vector<std::vector<float>> straight_bias;
  {
    LocalTrainer t(ckpt_config(d1, kMoe));
    for (int i = 0; i < 8; ++i) straight.push_back(t->train_step().loss);
    straight_bias = t->model().router_bias()->values();
  }
  {
    LocalTrainer t(ckpt_config(d2, kMoe));
    for (int i = 0; i < 4; ++i) resumed.push_back(t->train_step().loss);
    t->save_checkpoint();
    t->finish_checkpoint();
  }
  LocalTrainer t(ckpt_config(d2, kMoe));
  ASSERT_EQ(t->step(), 4);
  EXPECT_GT(model::router_bias_max_abs(t->model().router_bias()->values()), 0.0f);
  for (int i = 0; i < 4; ++i) resumed.push_back(t->train_step().loss);
  EXPECT_EQ(resumed, straight);
  EXPECT_EQ(t->model().router_bias()->values(), straight_bias);
}

// ---- The key ----------------------------------------------------------------------------

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    config::load_config_string("data:\n  source: synthetic\n", "test.yaml", overrides);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(RouterBiasConfig, BadValuesAreRefusedNamingTheKey) {
  const std::vector<std::string> moe = {"model.preset=tiny_moe"};
  for (const std::string v : {"-0.001", ".inf", ".nan", "fast"}) {
    std::vector<std::string> o = moe;
    o.push_back("model.router_bias_update_rate=" + v);
    EXPECT_NE(config_error(o).find("model.router_bias_update_rate"), std::string::npos) << v << ": " << config_error(o);
  }
  // A dense model has no router to balance.
  const std::string dense = config_error({"model.preset=tiny", "model.router_bias_update_rate=0.001"});
  EXPECT_NE(dense.find("key 'model.router_bias_update_rate'"), std::string::npos) << dense;
  EXPECT_NE(dense.find("needs a mixture of experts"), std::string::npos) << dense;
  const std::string zeroed =
      config_error({"model.preset=tiny_moe", "model.router_bias_update_rate=0.001", "model.num_experts=0",
                    "model.experts_per_token=0"});
  EXPECT_NE(zeroed.find("key 'model.num_experts'"), std::string::npos) << zeroed;
  EXPECT_EQ(config_error({"model.preset=tiny_moe", "model.router_bias_update_rate=0.001"}), "no error");
  EXPECT_EQ(config_error({"model.preset=tiny", "model.router_bias_update_rate=0"}), "no error");
}

}  // namespace
}  // namespace fsdp
