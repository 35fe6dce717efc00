// LoRA's layout under tensor parallelism (See Note [LoRA under tensor parallelism] in
// src/model/peft_units.cpp), checked against one rank's without running anything: each
// adapter follows its base (column-parallel q/k/v/gate/up: lora_A whole, lora_B split on its
// rows; row-parallel o/down: lora_A split on its columns, lora_B whole), every slot numbers
// its elements as one rank's layout does (whole_offset), so the seeded initialisation of the
// slices stacks into one rank's values bit for bit, the frozen base's slots carry their
// base's slice and both frozen sources (the seeded base, a Hugging Face folder) fill them
// with the slice's values, and the rank is checked against the whole layer's width. Under
// QLoRA each slice holds its blocks of the weight quantized whole and dequantizes to the
// whole's values bit for bit; a split that cuts NF4 blocks is refused naming the weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/peft.h"
#include "fsdp/train/base_model.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr int kT = 2;

model::PeftSpec all_linear(int64_t rank = 4) {
  model::PeftSpec p;
  p.lora.enabled = true;
  p.lora.rank = rank;
  p.lora.targets = {"all-linear"};
  return p;
}

model::LlamaConfig tiny(int tensor) {
  model::LlamaConfig c = config::training_model_config(config::load_config_string("", "x", {"model.preset=tiny"}));
  c.tensor_parallel = tensor;
  return c;
}

TEST(TensorParallelLora, AdaptersFollowTheirBase) {
  const model::LlamaConfig one = tiny(1);
  const std::vector<model::UnitLayout> whole = model::lora_units(one, all_linear());
  for (int t = 0; t < kT; ++t) {
    const std::vector<model::UnitLayout> units = model::lora_units(tiny(kT), all_linear(), t);
    ASSERT_EQ(units.size(), whole.size());
    for (size_t u = 0; u < units.size(); ++u) {
      ASSERT_EQ(units[u].params.size(), whole[u].params.size()) << units[u].name;
      for (const model::ParamSlot& s : units[u].params) {
        const model::ParamSlot& w = whole[u].slot(s.name);
        const std::string base = s.name.substr(0, s.name.rfind('.'));
        const bool a = s.name.ends_with(".lora_A");
        const bool row_parallel = base.ends_with(".wo") || base.ends_with(".w_down");
        // lora_A splits its columns with a row-parallel base, lora_B its rows with a column-parallel one.
        const int dim = a ? (row_parallel ? 1 : -1) : (row_parallel ? -1 : 0);
        const model::TensorSlice want = dim < 0 ? model::TensorSlice{} : model::TensorSlice{dim, kT, t};
        EXPECT_TRUE(s.tp == want) << s.name;
        EXPECT_EQ(s.whole_shape(), w.shape) << s.name;
        EXPECT_EQ(s.whole_offset, w.offset) << s.name;
        EXPECT_EQ(s.hf_name, w.hf_name) << s.name;
        // The base's slice is the frozen slot's.
        EXPECT_EQ(units[u].frozen_slot(base).tp.dim, row_parallel ? 1 : 0) << base;
      }
    }
    // Every tensor rank's unit has the same size and its whole slots at the same offsets
    // (the engine all-reduces their gradients over the tensor group element for element).
    const std::vector<model::UnitLayout> zero = model::lora_units(tiny(kT), all_linear(), 0);
    for (size_t u = 0; u < units.size(); ++u) {
      EXPECT_EQ(units[u].numel, zero[u].numel);
      EXPECT_EQ(units[u].frozen_bytes, zero[u].frozen_bytes);
      for (size_t i = 0; i < units[u].params.size(); ++i)
        EXPECT_EQ(units[u].params[i].offset, zero[u].params[i].offset);
    }
  }
  // A q_proj adapter: [4, 128] whole and [2 heads of 32 = 64 of 128, 4] on tensor rank 1.
  const std::vector<model::UnitLayout> rank1 = model::lora_units(tiny(kT), all_linear(), 1);
  const model::UnitLayout& b = rank1[1];
  EXPECT_EQ(b.slot("layers.0.wq.lora_A").shape, (Dims{4, 128}));
  EXPECT_EQ(b.slot("layers.0.wq.lora_B").shape, (Dims{64, 4}));
  EXPECT_EQ(b.slot("layers.0.w_down.lora_A").shape, (Dims{4, 176}));
  EXPECT_EQ(b.slot("layers.0.w_down.lora_B").shape, (Dims{128, 4}));
}

// Seeded adapters (A Kaiming-uniform over the whole fan-in, B zeros) stacked from the
// slices are one rank's, bit for bit.
TEST(TensorParallelLora, SeededAdaptersStackIntoOneRanks) {
  const std::vector<model::UnitLayout> whole = model::lora_units(tiny(1), all_linear());
  for (size_t u = 0; u < whole.size(); ++u) {
    Tensor want = Tensor::empty({whole[u].numel}, DType::F32);
    model::init_unit(whole[u], int(u), 7, 0.02, want, 0);
    Tensor got = Tensor::zeros({whole[u].numel}, DType::F32);
    for (int t = 0; t < kT; ++t) {
      const model::UnitLayout unit = model::lora_units(tiny(kT), all_linear(), t)[u];
      Tensor slice = Tensor::empty({unit.numel}, DType::F32);
      model::init_unit(unit, int(u), 7, 0.02, slice, 0);
      for (const model::ParamSlot& s : unit.params)
        for (int64_t i = 0; i < s.numel; ++i)
          got.set_flat(s.whole_offset + s.whole_index(i), slice.get_flat(s.offset + i));
    }
    EXPECT_TRUE(test::same_bits(got, want)) << whole[u].name;
  }
}

// A slot's values from its unit's frozen bytes.
Tensor frozen_values(const model::UnitLayout& unit, const Tensor& bytes, const std::string& name) {
  const model::FrozenSlot& f = unit.frozen_slot(name);
  Tensor v = Tensor::empty({f.numel}, DType::F32);
  model::frozen_slot_values(bytes, f, v);
  return v;
}

// Each tensor rank's frozen bytes hold the slices of one rank's base, from the seeded
// initialiser and from a Hugging Face folder (llama_gqa_tiny: 6 heads, 2 key/value heads,
// MLP 88, vocabulary 96).
void expect_frozen_slices(const std::vector<std::string>& keys) {
  std::vector<std::string> o = {"lora.enabled=true", "lora.rank=4", "lora.targets=all-linear"};
  o.insert(o.end(), keys.begin(), keys.end());
  const config::Config cfg = config::load_config_string("", "x", o);
  model::LlamaConfig one = config::training_model_config(cfg), split = one;
  split.tensor_parallel = kT;
  const model::PeftSpec peft = config::peft_spec(cfg, one);
  const std::vector<model::UnitLayout> whole = model::lora_units(one, peft);
  train::BaseSource source(cfg, split);
  for (int t = 0; t < kT; ++t) {
    const std::vector<model::UnitLayout> units = model::lora_units(split, peft, t);
    for (size_t u = 0; u < units.size(); ++u) {
      Tensor want_bytes = Tensor::empty({whole[u].frozen_bytes}, DType::U8);
      source.fill(whole[u], int(u), want_bytes, 0);
      Tensor bytes = Tensor::empty({units[u].frozen_bytes}, DType::U8);
      source.fill(units[u], int(u), bytes, 0);
      for (const model::FrozenSlot& f : units[u].frozen) {
        const Tensor got = frozen_values(units[u], bytes, f.name), all = frozen_values(whole[u], want_bytes, f.name);
        Tensor want = Tensor::empty({f.numel}, DType::F32);
        for (int64_t i = 0; i < f.numel; ++i) want.set_flat(i, all.get_flat(f.whole_index(i)));
        EXPECT_TRUE(test::same_bits(got, want)) << f.name << " on tensor rank " << t;
      }
    }
  }
}

TEST(TensorParallelLora, SeededBaseSlices) { expect_frozen_slices({"model.preset=tiny", "model.num_layers=1"}); }

TEST(TensorParallelLora, HuggingFaceBaseSlices) {
  expect_frozen_slices(
      {"model.init_from=" + std::string(FSDP_SOURCE_DIR) + "/tests/golden/llama_gqa_tiny", "train.seq_len=32"});
}

// The rank is bounded by the whole layer's width, not the slice's: k_proj is [64, 128], 32
// rows of it per tensor rank, and r = 48 fits it.
TEST(TensorParallelLora, RankIsCheckedAgainstTheWholeWidth) {
  EXPECT_NO_THROW(model::lora_units(tiny(kT), all_linear(48), 1));
  test::expect_error([&] { model::lora_units(tiny(kT), all_linear(65), 0); },
                     {"lora.rank 65 is outside [1, 64] for layers.0.wk", "[64, 128]"});
}

// QLoRA: every NF4 slice (rows of q/k/v/gate/up, columns of o/down, 192 of 384 for down)
// dequantizes to the whole weight's values at its elements, bit for bit; the norms and
// the embedding stay dense slices as under LoRA.
TEST(TensorParallelLora, QloraSlicesDequantizeToTheWholesBits) {
  expect_frozen_slices({"model.preset=tiny", "model.intermediate_size=384", "model.quantization=nf4"});
}

// A source that stores NF4 pieces (a bitsandbytes folder, HfFrozenSource::nf4_pieces):
// each weight's whole pieces, quantized from seeded values, asked for by the whole slot.
class StoredPieces final : public model::FrozenSource {
 public:
  void values(const model::FrozenSlot& slot, int64_t, const Tensor&) override {
    FAIL() << slot.name << ": values asked of a source that stores pieces";
  }
  bool nf4_pieces(const model::FrozenSlot& slot, const Nf4Tensors& out) override {
    EXPECT_TRUE(slot.tp.replicated()) << slot.name << ": pieces are the whole weight's";
    const Tensor w = test::random_tensor({slot.numel}, DType::F32, std::hash<std::string>()(slot.name), -1, 1);
    nf4_quantize(w, out, slot.name.c_str());
    return true;
  }
};

// From stored pieces, every tensor rank's slice of down_proj (columns: strided blocks) and
// q_proj (rows) dequantizes to the whole's values at its elements, bit for bit.
TEST(TensorParallelLora, QloraSlicesOfStoredPiecesAreTheWholes) {
  model::LlamaConfig one = tiny(1);
  one.intermediate_size = 384;
  model::LlamaConfig split = one;
  split.tensor_parallel = kT;
  model::PeftSpec p = all_linear();
  p.quantization = model::Quantization::Nf4;
  model::UnitLayout whole = model::lora_units(one, p)[1];
  whole.frozen.erase(std::remove_if(whole.frozen.begin(), whole.frozen.end(),
                                    [](const model::FrozenSlot& f) { return f.format != model::FrozenFormat::Nf4; }),
                     whole.frozen.end());
  StoredPieces source;
  Tensor want_bytes = Tensor::empty({whole.frozen_bytes}, DType::U8);
  model::fill_frozen_bytes(whole, want_bytes, 0, source);
  for (int t = 0; t < kT; ++t) {
    model::UnitLayout unit = model::lora_units(split, p, t)[1];
    unit.frozen.erase(std::remove_if(unit.frozen.begin(), unit.frozen.end(),
                                     [](const model::FrozenSlot& f) { return f.format != model::FrozenFormat::Nf4; }),
                      unit.frozen.end());
    Tensor bytes = Tensor::empty({unit.frozen_bytes}, DType::U8);
    model::fill_frozen_bytes(unit, bytes, 0, source);
    for (const char* name : {"layers.0.wq", "layers.0.w_down"}) {
      const model::FrozenSlot& f = unit.frozen_slot(name);
      EXPECT_TRUE(f.nf4.sliced) << name;
      const Tensor got = frozen_values(unit, bytes, name), all = frozen_values(whole, want_bytes, name);
      Tensor want = Tensor::empty({f.numel}, DType::F32);
      for (int64_t i = 0; i < f.numel; ++i) want.set_flat(i, all.get_flat(f.whole_index(i)));
      EXPECT_TRUE(test::same_bits(got, want)) << name << " on tensor rank " << t;
    }
  }
}

// tiny's down_proj [128, 352] splits into 176 columns per rank: NF4 blocks of the whole
// would straddle two ranks, so the layout is refused naming the weight.
TEST(TensorParallelLora, QloraSplitOffTheBlocksIsRefusedByName) {
  model::PeftSpec p = all_linear();
  p.quantization = model::Quantization::Nf4;
  test::expect_error([&] { model::lora_units(tiny(kT), p, 0); },
                     {"model.quantization nf4 with parallel.tensor 2: layers.0.w_down "
                      "(model.layers.0.mlp.down_proj.weight, [128, 352]) splits into 176 columns per tensor rank, "
                      "not a multiple of the NF4 block size 64"});
  EXPECT_NO_THROW(model::lora_units(tiny(1), p, 0));
}

}  // namespace
}  // namespace fsdp
