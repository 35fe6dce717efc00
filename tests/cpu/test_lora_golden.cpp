// LoRA against PEFT + transformers (tests/golden/lora_tiny, written by
// tests/golden/generate_peft.py): the tiny GQA Llama of llama_gqa_tiny frozen, adapters of
// rank 4 with lora_alpha 8 on every linear layer (all-linear), dropout 0, with and without
// rslora, A and B drawn at random so every adapter gradient is non-zero. The adapters load
// from the PEFT folder (lora.init_from's path); our logits, loss and every lora_A / lora_B
// gradient are held to PEFT's, computed in float64, within 1e-5 norm-wise (the golden
// Llama test's bound and reasoning: float32 rounding over a few hundred operations gives
// ~1e-6; a wrong scale, a transposed A or B, or a missing adapter moves them by 1e-1).
// The base gets no gradient: the embedding, head and norms have no trainable buffer and
// the blocks' buffers hold only adapters.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/lora_fixture.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/peft.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr double kTolerance = 1e-5;

class LoraGolden : public test::GoldenModelTest {
 protected:
  void SetUp() override { open(test::source_path("tests/golden/llama_gqa_tiny")); }

  // Our forward and forward_backward against expected.safetensors of one adapter case.
  void check_case(const std::string& adapter_dir, bool rslora) {
    model::Llama llama(cfg_, DType::F32, Device::cpu(), test::fixture_peft(rslora, false));
    auto params = test::lora_params(llama, dir_, adapter_dir);
    const ckpt::SafetensorsFile ref(adapter_dir + "/expected.safetensors");
    model::LlamaActivations act(cfg_, 2, 13, DType::F32, Device::cpu());
    load_batch(act);

    const model::LossSum fwd = llama.forward(act, *params);
    const double logits_err = test::rel_error(act.logits, test::expected_tensor(ref, "logits"));
    const double want_loss = test::expected_tensor(ref, "loss").get_flat(0);
    const double loss_err = std::abs(fwd.sum / double(fwd.tokens) - want_loss) / want_loss;
    EXPECT_LT(logits_err, kTolerance);
    EXPECT_LT(loss_err, kTolerance);

    const model::LossSum fb = llama.forward_backward(act, *params, 1.0 / double(fwd.tokens));
    EXPECT_EQ(fb.sum, fwd.sum);  // dropout 0: the training forward is the evaluation forward
    int checked = 0;
    const double worst = test::expect_adapter_gradients(llama, *params, ref, kTolerance, &checked);
    EXPECT_EQ(checked, 2 * 7 * 2);  // 2 layers x 7 linear layers x (A, B)
    std::printf("LoRA golden (%s): logits %.1e, loss %.1e, worst gradient %.1e (tolerance %.0e)\n",
                rslora ? "rslora" : "alpha/r", logits_err, loss_err, worst, kTolerance);
  }
};

TEST_F(LoraGolden, MatchesPeft) { check_case(test::source_path("tests/golden/lora_tiny/r4_alpha8"), false); }

TEST_F(LoraGolden, MatchesPeftWithRslora) {
  check_case(test::source_path("tests/golden/lora_tiny/r4_alpha8_rslora"), true);
}

// Mixtral (tests/golden/mixtral_lora_tiny, PEFT on transformers' MixtralForCausalLM in
// float32): all-linear adapts the router (block_sparse_moe.gate, [4, 48]: r = 4 is its
// width) and every expert's w1, w2, w3; the objective is the cross-entropy plus 0.02 x the
// load-balancing loss, as MixtralForCausalLM returns it. Float32 on both sides (the
// router's softmax is float32 in transformers whatever the dtype), so the bound is the
// same 1e-5.
TEST(MixtralLoraGolden, MatchesPeftOnRouterAndExperts) {
  const std::string base = test::source_path("tests/golden/mixtral_tiny");
  const std::string adapter = test::source_path("tests/golden/mixtral_lora_tiny/r4_alpha8");
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(base);
  model::Llama llama(cfg, DType::F32, Device::cpu(), test::fixture_peft(false, false));
  auto params = test::lora_params(llama, base, adapter);
  const ckpt::SafetensorsFile ref(adapter + "/expected.safetensors");
  const test::GoldenBatch batch = test::golden_batch(ref);
  model::LlamaActivations act(cfg, batch.B, batch.T, DType::F32, Device::cpu());
  act.ids.copy_(batch.ids);
  act.targets.copy_(batch.targets);
  const model::LossSum fwd = llama.forward(act, *params);
  const double logits_err = test::rel_error(act.logits, test::expected_tensor(ref, "logits"));
  const double loss = fwd.sum / double(fwd.tokens) + cfg.router_aux_loss_coef * fwd.router_aux;
  const double want = test::expected_tensor(ref, "loss").get_flat(0);
  EXPECT_LT(logits_err, kTolerance);
  EXPECT_LT(std::abs(loss - want) / want, kTolerance);
  llama.forward_backward(act, *params, 1.0 / double(fwd.tokens), 1.0);
  int checked = 0;
  const double worst = test::expect_adapter_gradients(llama, *params, ref, kTolerance, &checked);
  EXPECT_EQ(checked, 2 * (4 + 1 + 3 * 4) * 2);  // 2 layers x (q, k, v, o, router, 3 per expert) x (A, B)
  std::printf("Mixtral LoRA golden: logits %.1e, loss %.1e, worst adapter gradient %.1e (tolerance %.0e)\n",
              logits_err, std::abs(loss - want) / want, worst, kTolerance);
}

// PEFT's initialisation (B zeros) leaves the model exactly the base: the same logits as the
// plain model on the same weights, bit for bit.
TEST_F(LoraGolden, FreshAdaptersLeaveTheBaseUnchanged) {
  model::Llama plain(cfg_);
  auto plain_params = test::GoldenModel(dir_).params(plain, DType::F32, Device::cpu());
  model::LlamaActivations a(cfg_, 2, 13, DType::F32, Device::cpu());
  load_batch(a);
  plain.forward(a, *plain_params);

  model::Llama lora(cfg_, DType::F32, Device::cpu(), test::fixture_peft(false, false));
  auto params = test::lora_params(lora, dir_, "");
  for (int u = 0; u < int(lora.units().size()); ++u)
    model::init_unit(lora.units()[size_t(u)], u, 42, 0.02, params->params(u));
  model::LlamaActivations b(cfg_, 2, 13, DType::F32, Device::cpu());
  load_batch(b);
  lora.forward(b, *params);
  EXPECT_TRUE(test::same_bits(b.logits, a.logits));
}

// The layout: the base is all frozen (nothing trains but the adapters), every targeted
// weight has A [r, in] and B [out, r] with PEFT's names, the scale follows rslora.
TEST(LoraLayout, FreezesTheBaseAndAddsAdaptersWithPeftNames) {
  const model::LlamaConfig cfg = model::llama_preset("tiny");
  model::PeftSpec p;
  p.lora.enabled = true;
  p.lora.rank = 8;
  p.lora.alpha = 16;
  p.lora.targets = {"q_proj", "down_proj"};
  const auto units = model::lora_units(cfg, p);
  const auto plain = model::llama_units(cfg);
  ASSERT_EQ(units.size(), plain.size());
  EXPECT_EQ(units[0].numel, 0);  // the embedding: frozen, nothing to train
  EXPECT_EQ(units.back().numel, 0);
  for (size_t u = 0; u < units.size(); ++u) EXPECT_EQ(units[u].frozen.size(), plain[u].params.size());
  const model::UnitLayout& b = units[1];
  ASSERT_EQ(b.params.size(), 4u);
  EXPECT_EQ(b.params[0].name, "layers.0.wq.lora_A");
  EXPECT_EQ(b.params[0].hf_name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(b.params[0].shape, (Dims{8, 128}));
  EXPECT_EQ(b.params[1].shape, (Dims{128, 8}));
  EXPECT_EQ(b.params[3].hf_name, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(b.params[3].shape, (Dims{128, 8}));
  EXPECT_EQ(b.lora_scale, 2.0);
  p.lora.rslora = true;
  EXPECT_DOUBLE_EQ(model::lora_units(cfg, p)[1].lora_scale, 16.0 / std::sqrt(8.0));
  p.lora.targets = {"all-linear"};
  EXPECT_EQ(model::lora_units(cfg, p)[1].params.size(), 14u);
}

TEST(LoraLayout, BadTargetsRanksAndNf4ShapesNameTheKey) {
  const model::LlamaConfig cfg = model::llama_preset("tiny");  // hidden 128, kv dim 64
  model::PeftSpec p;
  p.lora.enabled = true;
  p.lora.targets = {"qproj"};
  test::expect_error([&] { model::lora_units(cfg, p); },
                     {"lora.targets: 'qproj' names no module of this model", "q_proj, k_proj", "all-linear"});
  p.lora.targets = {"w1"};  // Mixtral's, not Llama's
  test::expect_error([&] { model::lora_units(cfg, p); }, {"'w1' names no module"});
  p.lora.targets = {"k_proj"};
  p.lora.rank = 65;  // k_proj is [64, 128]
  test::expect_error([&] { model::lora_units(cfg, p); },
                     {"lora.rank 65 is outside [1, 64] for layers.0.wk", "model.layers.0.self_attn.k_proj.weight"});
  p.lora.rank = 0;
  test::expect_error([&] { model::lora_units(cfg, p); }, {"lora.rank 0 is outside [1, 64]"});
  model::LlamaConfig odd = cfg;
  odd.hidden_size = 100;  // q_proj is 100 x 100 = 10000 elements: not a multiple of 64
  odd.num_heads = 4;
  odd.num_kv_heads = 2;
  p.lora.rank = 4;
  p.quantization = model::Quantization::Nf4;
  test::expect_error([&] { model::lora_units(odd, p); },
                     {"model.quantization nf4: layers.0.wq", "10000 elements", "not a multiple of the NF4 block size 64"});
  model::PeftSpec no_lora;
  no_lora.quantization = model::Quantization::Nf4;
  test::expect_error([&] { model::lora_units(cfg, no_lora); }, {"model.quantization nf4 needs lora.enabled"});
}

}  // namespace
}  // namespace fsdp
