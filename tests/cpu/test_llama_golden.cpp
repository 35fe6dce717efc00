// Whole-model golden test against Hugging Face transformers' LlamaForCausalLM (the
// llm.c test_gpt2 pattern): a tiny random GQA Llama saved by transformers is loaded
// through our importer, and our logits, loss and every parameter gradient are compared
// with the reference computed by tests/golden/generate_llama.py in float64.
//
// Tolerance 1e-5 (norm-wise relative): our forward/backward runs in float32, whose
// rounding (~6e-8 per operation) accumulates over a few hundred sequential operations
// per output in this 2-layer model to ~1e-6; a wrong convention (RoPE halves, GQA head
// mapping, label shift, RMSNorm eps placement) shows up as 1e-2 or worse.
#include <gtest/gtest.h>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/model/decoder.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/model/local_params.h"
#include "../common/golden_fixture.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr double kGoldenTolerance = 1e-5;

class LlamaGolden : public test::GoldenModelTest {
 protected:
  void SetUp() override { open(test::source_path("tests/golden/llama_gqa_tiny")); }
};

TEST_F(LlamaGolden, ConfigMatchesFixture) {
  EXPECT_EQ(cfg_.vocab_size, 96);
  EXPECT_EQ(cfg_.hidden_size, 48);
  EXPECT_EQ(cfg_.num_heads, 6);
  EXPECT_EQ(cfg_.num_kv_heads, 2);
  EXPECT_EQ(cfg_.num_layers, 2);
}

TEST_F(LlamaGolden, LogitsLossAndEveryGradientMatchTransformers) {
  model::Llama llama(cfg_);
  model::LocalParams params(llama.units());
  const ckpt::SafetensorsFolder folder(dir_);
  for (int u = 0; u < int(llama.units().size()); ++u) ckpt::load_hf_unit(folder, llama.units()[u], params.params(u));

  const auto shape = expected_->entry("input_ids").shape;
  model::LlamaActivations act(cfg_, shape[0], shape[1], DType::F32, Device::cpu());
  load_batch(act);

  const model::LossSum fwd = llama.forward(act, params);
  EXPECT_LT(test::rel_error(act.logits, expected("logits")), kGoldenTolerance);
  const double ref_loss = expected("loss").get_flat(0);
  EXPECT_EQ(fwd.tokens, 21);  // 2 x 12 shifted targets minus the 3 ignored labels
  EXPECT_LT(std::abs(fwd.sum / double(fwd.tokens) - ref_loss) / std::abs(ref_loss), kGoldenTolerance);

  const model::LossSum fb = llama.forward_backward(act, params, 1.0 / double(fwd.tokens));
  EXPECT_EQ(fb.sum, fwd.sum);  // the same forward, bit for bit
  EXPECT_EQ(expect_every_gradient(llama, params, kGoldenTolerance).checked, 2 + 2 * 9 + 1);  // embedding, 9 per block, lm_head + norm
}

TEST_F(LlamaGolden, ImportRefusesMissingTensorAndWrongShape) {
  model::LlamaConfig wrong = cfg_;
  wrong.intermediate_size = 64;  // the fixture has 88
  const ckpt::SafetensorsFolder folder(dir_);
  const auto units = model::llama_units(wrong);
  Tensor flat = Tensor::empty({units[1].numel}, DType::F32);
  try {
    ckpt::load_hf_unit(folder, units[1], flat);
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[88, 48]"), std::string::npos) << e.what();
  }
  model::LlamaConfig deeper = cfg_;
  deeper.num_layers = 3;
  const auto units3 = model::llama_units(deeper);
  Tensor flat3 = Tensor::empty({units3[3].numel}, DType::F32);
  try {
    ckpt::load_hf_unit(folder, units3[3], flat3);
    FAIL() << "expected a missing-tensor error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.2."), std::string::npos) << e.what();
  }
}

TEST_F(LlamaGolden, ShardedImportEqualsWholeImport) {
  // A rank loading only its slice of a unit gets exactly the slice of the whole unit.
  model::Llama llama(cfg_);
  const ckpt::SafetensorsFolder folder(dir_);
  const model::UnitLayout& unit = llama.units()[1];
  Tensor whole = Tensor::empty({unit.numel}, DType::F32);
  ckpt::load_hf_unit(folder, unit, whole);
  const int64_t begin = 1000, len = 3001;  // cuts through several tensors
  Tensor part = Tensor::empty({len}, DType::F32);
  ckpt::load_hf_unit(folder, unit, part, begin);
  for (int64_t i = 0; i < len; ++i) ASSERT_EQ(part.get_flat(i), whole.get_flat(begin + i)) << i;
}

TEST_F(LlamaGolden, Bf16WeightsLoadAsTheirExactFloat32Values) {
  const std::string bdir = test::source_path("tests/golden/llama_bf16_tiny");
  const model::LlamaConfig c = ckpt::read_hf_llama_config(bdir);
  const ckpt::SafetensorsFolder folder(bdir);
  const ckpt::SafetensorsFile ref(bdir + "/reference/reference_f32.safetensors");
  const auto units = model::llama_units(c);
  for (const auto& unit : units) {
    Tensor flat = Tensor::empty({unit.numel}, DType::F32);
    ckpt::load_hf_unit(folder, unit, flat);
    for (const auto& p : unit.params) {
      const auto want = ckpt::read_as_f32(ref.entry(p.hf_name));
      const Tensor got = unit.view(flat, p.name);
      for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(float(got.get_flat(i)), want[size_t(i)]) << p.hf_name;
    }
  }
}

}  // namespace
}  // namespace fsdp
