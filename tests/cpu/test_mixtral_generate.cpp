// Generation with a mixture of experts: the KV-cache decoder on the golden Mixtral against
// its own full forward pass (every position, prefill split anyhow), and greedy generation
// against transformers' generate() (tests/golden/mixtral_tiny/greedy_generate.json, from
// tests/golden/generate_greedy.py --model mixtral_tiny). Tolerance as test_generate.cpp's
// (1e-5: the two paths differ only in attention's summation order); the routing of a token
// does not depend on the chunk it arrives in, so no expert choice differs between the paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/generate.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/sampling.h"
#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr double kDecodeTolerance = 1e-5;

std::string mixtral_dir() { return test::source_path("tests/golden/mixtral_tiny"); }

struct MixtralModel {
  model::LlamaConfig cfg = ckpt::read_hf_llama_config(mixtral_dir());
  model::Llama llama{cfg};
  model::LocalParams params{llama.units()};
  MixtralModel() {
    const ckpt::SafetensorsFolder folder(mixtral_dir());
    for (int u = 0; u < params.num_units(); ++u) ckpt::load_hf_unit(folder, llama.units()[size_t(u)], params.params(u));
  }
};

MixtralModel& mixtral() {
  static MixtralModel m;
  return m;
}

TEST(MixtralGenerate, DecoderLogitsEqualFullForwardAtEveryPosition) {
  MixtralModel& m = mixtral();
  const int64_t T = 40;
  std::mt19937_64 rng(31);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(m.cfg.vocab_size));
  model::LlamaActivations act(m.cfg, 1, T, DType::F32, Device::cpu());
  for (int64_t i = 0; i < T; ++i) {
    act.ids.set({i}, ids[size_t(i)]);
    act.targets.set({i}, double(kIgnoreIndex));
  }
  m.llama.forward(act, m.params);
  for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{T}, std::vector<int64_t>(size_t(T), 1),
                                             std::vector<int64_t>{3, 17, 1, 19}}) {
    model::LlamaDecoder dec(m.cfg, 1, m.cfg.max_seq_len, T);
    int64_t pos = 0;
    double worst = 0;
    for (int64_t n : chunks) {
      Tensor chunk = Tensor::empty({1, n}, DType::I32);
      for (int64_t t = 0; t < n; ++t) chunk.set({0, t}, ids[size_t(pos + t)]);
      const Tensor logits = dec.forward(chunk, m.params, /*all_rows=*/true);
      for (int64_t t = 0; t < n; ++t)
        worst = std::max(worst, test::rel_error(logits.select(0, t), act.logits.select(0, pos + t)));
      pos += n;
    }
    EXPECT_LT(worst, kDecodeTolerance) << chunks.size() << " chunks";
  }
}

// A model trained with routing biases (model/router_bias.h) decodes with them: the decoder
// with the biases set gives the logits of the full forward with the same biases, and those
// differ from the unbiased model's (the biases move choices).
TEST(MixtralGenerate, DecoderRoutesWithTheBiasesAsTheFullForwardDoes) {
  MixtralModel& m = mixtral();
  const int64_t T = 24;
  std::mt19937_64 rng(37);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(m.cfg.vocab_size));
  std::vector<std::vector<float>> bias(size_t(m.cfg.num_layers), std::vector<float>(size_t(m.cfg.num_experts)));
  for (size_t l = 0; l < bias.size(); ++l)
    for (size_t e = 0; e < bias[l].size(); ++e) bias[l][e] = float(int64_t((e + l) % 3) - 1) * 0.125f;
  auto forward = [&](model::Llama& llama) {
    model::LlamaActivations act(m.cfg, 1, T, DType::F32, Device::cpu());
    for (int64_t i = 0; i < T; ++i) {
      act.ids.set({i}, ids[size_t(i)]);
      act.targets.set({i}, double(kIgnoreIndex));
    }
    llama.forward(act, m.params);
    return act.logits.clone();
  };
  model::Llama biased(m.cfg);
  biased.router_bias()->set(bias);
  const Tensor want = forward(biased), plain = forward(m.llama);
  EXPECT_GT(test::rel_error(want, plain), 1e-3) << "the biases changed no routing";
  model::LlamaDecoder dec(m.cfg, 1, m.cfg.max_seq_len, T);
  dec.router_bias()->set(bias);
  int64_t pos = 0;
  double worst = 0;
  for (int64_t n : {5, 1, 18}) {
    Tensor chunk = Tensor::empty({1, n}, DType::I32);
    for (int64_t t = 0; t < n; ++t) chunk.set({0, t}, ids[size_t(pos + t)]);
    const Tensor logits = dec.forward(chunk, m.params, /*all_rows=*/true);
    for (int64_t t = 0; t < n; ++t) worst = std::max(worst, test::rel_error(logits.select(0, t), want.select(0, pos + t)));
    pos += n;
  }
  EXPECT_LT(worst, kDecodeTolerance);
}

TEST(MixtralGenerate, GreedyEqualsTransformersGenerate) {
  MixtralModel& m = mixtral();
  std::ifstream in(mixtral_dir() + "/greedy_generate.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const int32_t eos = fixture["eos_token_id"].get<int32_t>();
  ASSERT_GE(fixture["cases"].size(), 3u);
  for (const auto& c : fixture["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = c["expected_ids"].get<std::vector<int32_t>>();
    for (int64_t chunk : {int64_t(prompt.size()), int64_t(8)}) {
      model::LlamaDecoder dec(m.cfg, 1, m.cfg.max_seq_len, std::min<int64_t>(chunk, m.cfg.max_seq_len));
      model::Sampler greedy(model::SamplingOptions{.temperature = 0});
      const auto r = model::generate(dec, m.params, prompt, greedy, c["max_new_tokens"].get<int64_t>(), eos,
                                     [](int32_t) {});
      EXPECT_EQ(r.tokens, expected) << "prompt of " << prompt.size() << " tokens, chunk " << chunk;
      EXPECT_EQ(r.hit_eos, c["hit_eos"].get<bool>());
    }
  }
}

}  // namespace
}  // namespace fsdp
