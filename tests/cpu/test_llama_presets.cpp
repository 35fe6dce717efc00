// The model presets are one table (model::llama_presets): llama_preset reads it, and so do
// model.preset's schema row, its error and `train --help` (tests/cpu/test_config.cpp).
// Pinned here: the names in their order, the error for an unknown one, and the published
// shapes (every preset valid; Llama 2 7B's 6,738,415,616 parameters, Mixtral 8x7B's
// 46,702,792,704, Llama 3 8B's 8,030,261,248 and 70B's 70,553,706,496, the same for 3.1,
// whose presets add Llama 3.1's RoPE scaling and context).
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "fsdp/model/llama_config.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

TEST(LlamaPresets, NamesInTheirOrder) {
  const std::vector<std::string_view> want = {"tiny",         "tiny_moe",  "llama2_7b",  "llama2_13b",
                                              "llama2_70b",   "codellama_7b", "mixtral_8x7b", "llama3_8b",
                                              "llama3_70b",   "llama3.1_8b",  "llama3.1_70b"};
  EXPECT_EQ(model::llama_preset_names(), want);
  ASSERT_EQ(model::llama_presets().size(), want.size());
}

TEST(LlamaPresets, EachNameGivesItsRowAndAValidShape) {
  for (const model::LlamaPreset& p : model::llama_presets()) {
    const model::LlamaConfig c = model::llama_preset(std::string(p.name));
    EXPECT_EQ(c.summary(), p.config.summary()) << p.name;
    EXPECT_NO_THROW(c.validate()) << p.name;
  }
  const model::LlamaConfig tiny = model::llama_preset("tiny");
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(tiny.num_kv_heads, 2);
  EXPECT_EQ(model::llama_preset("llama2_7b").num_parameters(), int64_t(6738415616));
  EXPECT_EQ(model::llama_preset("llama2_70b").num_kv_heads, 8);
  EXPECT_EQ(model::llama_preset("codellama_7b").rope_theta, 1000000.0);
  // Mixtral 8x7B: the published 46.7B parameters, 12.9B active per token (top-2 of 8).
  const model::LlamaConfig mixtral = model::llama_preset("mixtral_8x7b");
  EXPECT_EQ(mixtral.num_parameters(), int64_t(46702792704));
  EXPECT_EQ(mixtral.num_active_parameters(), int64_t(12879925248));
  EXPECT_EQ(mixtral.router_aux_loss_coef, 0.02);
  EXPECT_EQ(model::llama_preset("tiny_moe").num_experts, 8);
  // Llama 3: GQA (8 kv heads), vocab 128256, theta 500000, 8192 positions, no scaling;
  // 3.1: the same weights' shapes with llama3 scaling (8, 1, 4, 8192) over 131072 positions.
  for (const char* name : {"llama3_8b", "llama3.1_8b"}) {
    const model::LlamaConfig c = model::llama_preset(name);
    EXPECT_EQ(c.num_parameters(), int64_t(8030261248)) << name;
    EXPECT_EQ(c.vocab_size, 128256);
    EXPECT_EQ(c.num_kv_heads, 8);
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
  }
  EXPECT_EQ(model::llama_preset("llama3_70b").num_parameters(), int64_t(70553706496));
  EXPECT_EQ(model::llama_preset("llama3.1_70b").num_parameters(), int64_t(70553706496));
  EXPECT_EQ(model::llama_preset("llama3_8b").max_seq_len, 8192);
  EXPECT_EQ(model::llama_preset("llama3_8b").rope_scaling, model::RopeScaling{});
  const model::RopeScaling llama31{model::RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 8192};
  for (const char* name : {"llama3.1_8b", "llama3.1_70b"}) {
    EXPECT_EQ(model::llama_preset(name).max_seq_len, 131072) << name;
    EXPECT_EQ(model::llama_preset(name).rope_scaling, llama31) << name;
  }
}

TEST(LlamaPresets, UnknownNameListsTheKnownOnes) {
  expect_error([] { model::llama_preset("llama3_7b"); },
               {"unknown model preset 'llama3_7b' (known: tiny, tiny_moe, llama2_7b, llama2_13b, llama2_70b, codellama_7b, "
                "mixtral_8x7b, llama3_8b, llama3_70b, llama3.1_8b, llama3.1_70b)"});
}

}  // namespace
}  // namespace fsdp::test
