// QLoRA against bitsandbytes + transformers + PEFT (tests/golden/llama_nf4_bnb and
// qlora_tiny, written by tests/golden/generate_peft.py with bitsandbytes 0.47.0 on a CPU):
//   - the bitsandbytes-saved 4-bit folder loads as a frozen NF4 base (its pieces as stored)
//     and gives transformers' 4-bit logits and loss (float32 compute on both sides, the
//     dequantized weights identical: the bound 1e-5 is the float32 one of the dense golden
//     test; measured below);
//   - PEFT's adapter on that 4-bit base (Linear4bit + lora.Linear4bit): logits, loss and every
//     adapter gradient within 1e-5;
//   - quantizing the dense llama_gqa_tiny at load gives the bytes bitsandbytes saved: packed
//     codes bit for bit, and absmax codes and nested absmax too wherever the two offsets (the
//     absmax's float32 mean, device-dependent in torch) agree, which is counted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../common/lora_fixture.h"
#include "fsdp/model/param_init.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr double kTolerance = 1e-5;

class QloraGolden : public test::GoldenModelTest {
 protected:
  void SetUp() override {
    open(test::source_path("tests/golden/llama_gqa_tiny"));
    bnb_ = test::source_path("tests/golden/llama_nf4_bnb");
  }
  model::PeftSpec nf4_spec() const {
    return test::fixture_peft(false, true, ckpt::base_weight_dtype(ckpt::SafetensorsFolder(bnb_)));
  }
  std::string bnb_;
};

TEST_F(QloraGolden, BitsandbytesFolderGivesTransformersFourBitLogits) {
  EXPECT_TRUE(ckpt::is_bnb_4bit_folder(bnb_));
  model::Llama llama(cfg_, DType::F32, Device::cpu(), nf4_spec());
  auto params = test::lora_params(llama, bnb_, "");
  // PEFT's initialisation: B = 0, so the model computes the base alone.
  for (int u = 0; u < int(llama.units().size()); ++u)
    model::init_unit(llama.units()[size_t(u)], u, 3, 0.02, params->params(u));
  model::LlamaActivations act(cfg_, 2, 13, DType::F32, Device::cpu());
  load_batch(act);
  const model::LossSum l = llama.forward(act, *params);
  const ckpt::SafetensorsFile ref(bnb_ + "/expected.safetensors");
  const double logits_err = test::rel_error(act.logits, test::expected_tensor(ref, "logits"));
  const double want = test::expected_tensor(ref, "loss").get_flat(0);
  const double loss_err = std::abs(l.sum / double(l.tokens) - want) / want;
  EXPECT_LT(logits_err, kTolerance);
  EXPECT_LT(loss_err, kTolerance);
  std::printf("bitsandbytes 4-bit folder: logits %.1e, loss %.1e against transformers' Linear4bit model\n",
              logits_err, loss_err);
}

TEST_F(QloraGolden, PeftAdapterOnTheFourBitBaseMatches) {
  const std::string adapter = test::source_path("tests/golden/qlora_tiny/r4_alpha8");
  model::Llama llama(cfg_, DType::F32, Device::cpu(), nf4_spec());
  auto params = test::lora_params(llama, bnb_, adapter);
  const ckpt::SafetensorsFile ref(adapter + "/expected.safetensors");
  model::LlamaActivations act(cfg_, 2, 13, DType::F32, Device::cpu());
  load_batch(act);
  const model::LossSum fwd = llama.forward(act, *params);
  const double logits_err = test::rel_error(act.logits, test::expected_tensor(ref, "logits"));
  EXPECT_LT(logits_err, kTolerance);
  llama.forward_backward(act, *params, 1.0 / double(fwd.tokens));
  const double worst = test::expect_adapter_gradients(llama, *params, ref, kTolerance);
  std::printf("QLoRA golden: logits %.1e, worst adapter gradient %.1e (tolerance %.0e)\n", logits_err, worst,
              kTolerance);
}

// The same weights quantized by us at load (from the dense folder) and by bitsandbytes.
TEST_F(QloraGolden, QuantizingAtLoadGivesBitsandbytesBytes) {
  const model::PeftSpec spec = nf4_spec();
  const auto units = model::lora_units(cfg_, spec);
  const ckpt::SafetensorsFolder dense(dir_), bnb(bnb_);
  ckpt::HfFrozenSource from_dense(dense), from_bnb(bnb);
  int weights = 0, same_offset = 0;
  for (const model::UnitLayout& unit : units) {
    if (unit.frozen.empty()) continue;
    Tensor ours = Tensor::empty({unit.frozen_bytes}, DType::U8), theirs = Tensor::empty({unit.frozen_bytes}, DType::U8);
    model::fill_frozen_bytes(unit, ours, 0, from_dense);
    model::fill_frozen_bytes(unit, theirs, 0, from_bnb);
    for (const model::FrozenSlot& s : unit.frozen) {
      if (s.format != model::FrozenFormat::Nf4) {
        EXPECT_EQ(std::memcmp(ours.data<uint8_t>() + s.byte_offset, theirs.data<uint8_t>() + s.byte_offset,
                              size_t(s.bytes)), 0) << s.hf_name;
        continue;
      }
      ++weights;
      const Nf4Tensors a = model::nf4_pieces_of(ours, s), b = model::nf4_pieces_of(theirs, s);
      EXPECT_TRUE(test::same_bits(a.packed, b.packed)) << s.hf_name;
      EXPECT_TRUE(test::same_bits(a.code, b.code)) << s.hf_name;
      EXPECT_TRUE(test::same_bits(a.nested_code, b.nested_code)) << s.hf_name;
      const float oa = a.offset.data<float>()[0], ob = b.offset.data<float>()[0];
      EXPECT_LE(std::fabs(oa - ob), std::fabs(std::nextafter(ob, 2 * ob) - ob)) << s.hf_name;
      if (oa != ob) continue;
      ++same_offset;
      EXPECT_TRUE(test::same_bits(a.absmax, b.absmax)) << s.hf_name;
      EXPECT_TRUE(test::same_bits(a.nested_absmax, b.nested_absmax)) << s.hf_name;
    }
  }
  EXPECT_EQ(weights, 14);
  EXPECT_GT(same_offset, 0);
  std::printf("quantized at load vs bitsandbytes: %d of %d weights with the same float32 offset, all bytes equal; "
              "packed codes equal in all %d\n", same_offset, weights, weights);
}

}  // namespace
}  // namespace fsdp
