// The sparse MoE decoder's gradient in float64 against central finite differences of its
// whole objective, cross-entropy + aux_coef * load-balancing loss + z_coef * z-loss (the
// golden test covers the first two against transformers; nobody else computes the z-loss),
// plus bitwise determinism. A finite difference moves the router logits by ~1e-6, far
// below the margin between any token's k-th and (k+1)-th expert in this seeded model, so
// the top-k choice is held fixed, as the analytic gradient assumes.
#include <gtest/gtest.h>

#include <cmath>

#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/param_init.h"
#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp {
namespace {

model::LlamaConfig moe_config(int64_t k = 2) {
  model::LlamaConfig c{53, 16, 12, 2, 2, 1, 16, 10000.0, 1e-5};
  c.num_experts = 5;
  c.experts_per_token = k;
  c.router_aux_loss_coef = 0.3;  // large, so its share of the gradient is checked too
  c.router_z_loss_coef = 0.05;
  return c;
}

constexpr int64_t kBatch = 2, kSeq = 7;

struct MoeRun {
  model::Llama llama;
  model::LocalParams params;
  model::LlamaActivations act;

  explicit MoeRun(const model::LlamaConfig& c)
      : llama(c, DType::F64), params(llama.units(), DType::F64), act(c, kBatch, kSeq, DType::F64, Device::cpu()) {
    for (int u = 0; u < params.num_units(); ++u) {
      Tensor f32 = Tensor::empty({llama.units()[size_t(u)].numel}, DType::F32);
      model::init_unit(llama.units()[size_t(u)], u, 77, 0.5, f32, 0);
      params.params(u).copy_(f32);
    }
    for (int64_t i = 0; i < kBatch * kSeq; ++i) {
      act.ids.set({i}, double((i * 17 + 3) % c.vocab_size));
      act.targets.set({i}, i % 5 == 4 ? double(kIgnoreIndex) : double((i * 29 + 11) % c.vocab_size));
    }
  }

  double objective() {
    const model::LossSum l = llama.forward(act, params);
    const auto& c = llama.config();
    return l.sum / double(l.tokens) + c.router_aux_loss_coef * l.router_aux + c.router_z_loss_coef * l.router_z;
  }
};

class MoeDecoderK : public ::testing::TestWithParam<int64_t> {};

// k = 1: the renormalised weight is always 1, so the router learns only from the router
// losses (as in transformers); k = E: every expert runs for every token.
INSTANTIATE_TEST_SUITE_P(TopK, MoeDecoderK, ::testing::Values(1, 2, 5));

TEST_P(MoeDecoderK, GradientOfTheWholeObjectiveMatchesFiniteDifferences) {
  MoeRun r(moe_config(GetParam()));
  const model::LossSum l = r.llama.forward(r.act, r.params);
  ASSERT_GT(l.router_aux, 0.0);
  ASSERT_GT(l.router_z, 0.0);
  r.llama.forward_backward(r.act, r.params, 1.0 / double(l.tokens), 1.0);
  const model::UnitLayout& block = r.llama.units()[1];
  int checked = 0;
  for (const char* name : {"layers.0.router", "layers.0.experts.1.w1", "layers.0.experts.3.w3",
                           "layers.0.experts.4.w2", "layers.0.mlp_norm", "layers.0.wq"}) {
    const model::ParamSlot& s = block.slot(name);
    for (int64_t i = 0; i < s.numel; i += std::max<int64_t>(1, s.numel / 7)) {
      const int64_t at = s.offset + i;
      const Tensor p = r.params.params(1);
      const double x = p.get_flat(at), h = 1e-6;
      p.set_flat(at, x + h);
      const double up = r.objective();
      p.set_flat(at, x - h);
      const double down = r.objective();
      p.set_flat(at, x);
      const double fd = (up - down) / (2 * h), analytic = r.params.grads(1).get_flat(at);
      EXPECT_NEAR(analytic, fd, 1e-6 + 1e-5 * std::abs(fd)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(MoeDecoder, TheZLossAloneMovesOnlyTheRouter) {
  // With only the z-loss term different, the expert weights' gradients are identical bit
  // for bit and the router's differ: the z-loss reaches nothing but the router logits.
  model::LlamaConfig with = moe_config(), without = moe_config();
  without.router_z_loss_coef = 0;
  MoeRun a(with), b(without);
  a.llama.forward_backward(a.act, a.params, 0.1, 1.0);
  b.llama.forward_backward(b.act, b.params, 0.1, 1.0);
  const model::UnitLayout& block = a.llama.units()[2];
  const Tensor ga = a.params.grads(2), gb = b.params.grads(2);
  const Tensor wa = block.view(ga, "layers.1.experts.0.w2"), wb = block.view(gb, "layers.1.experts.0.w2");
  for (int64_t i = 0; i < wa.numel(); ++i) ASSERT_EQ(wa.get_flat(i), wb.get_flat(i)) << i;
  const Tensor ra = block.view(ga, "layers.1.router"), rb = block.view(gb, "layers.1.router");
  double diff = 0;
  for (int64_t i = 0; i < ra.numel(); ++i) diff += std::abs(ra.get_flat(i) - rb.get_flat(i));
  EXPECT_GT(diff, 0.0);
}

TEST(MoeDecoder, TwoRunsGiveTheSameBits) {
  MoeRun a(moe_config()), b(moe_config());
  const model::LossSum la = a.llama.forward_backward(a.act, a.params, 0.1, 1.0);
  const model::LossSum lb = b.llama.forward_backward(b.act, b.params, 0.1, 1.0);
  EXPECT_EQ(la.sum, lb.sum);
  EXPECT_EQ(la.router_aux, lb.router_aux);
  EXPECT_EQ(la.router_z, lb.router_z);
  for (int u = 0; u < a.params.num_units(); ++u) {
    const Tensor ga = a.params.grads(u), gb = b.params.grads(u);
    for (int64_t i = 0; i < ga.numel(); ++i) ASSERT_EQ(ga.get_flat(i), gb.get_flat(i)) << u << " " << i;
  }
}

TEST(MoeDecoder, ParameterCountsCountEveryExpertAndActiveOnesPerToken) {
  const model::LlamaConfig c = moe_config();
  int64_t total = 0;
  for (const auto& u : model::llama_units(c)) total += u.numel;
  EXPECT_EQ(c.num_parameters(), total);
  const int64_t per_expert = 3 * c.hidden_size * c.intermediate_size;
  EXPECT_EQ(c.num_parameters() - c.num_active_parameters(),
            c.num_layers * (c.num_experts - c.experts_per_token) * per_expert);
}

}  // namespace
}  // namespace fsdp
