// Inference on a CUDA device: the KV-cache decoder (LlamaDecoder with Device::cuda(0)) and
// the generation loop around it, on the golden fixture's weights (tests/golden/llama_gqa_tiny).
//   * the decoder's logits, prefilled in uneven chunks and then one token at a time,
//     against the CUDA model's full forward pass and against the CPU decoder;
//   * greedy generation on the device against transformers' generate()
//     (greedy_generate.json, as tests/cpu/test_generate.cpp checks the CPU).
//
// Tolerance 1e-5 (norm-wise relative, worst row), the CPU decoder test's: the decoder and
// the forward pass run the same float32 ops and differ in the order attention sums its
// terms (flash-decoding chunks vs the training kernel's tiles, and the CPU's loops), ~1e-6
// at the logits; a cache bug (a wrong RoPE position, a stale row) lands far above it.
// Greedy ids are compared exactly, as on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_test_util.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/model/generate.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/sampling.h"
#include "fsdp/ops/cross_entropy.h"

namespace fsdp::test {
namespace {

constexpr double kDecodeTolerance = 1e-5;

std::string golden_dir() { return source_path("tests/golden/llama_gqa_tiny"); }

// The fixture's weights in float32 on `device`.
std::unique_ptr<model::LocalParams> golden_params(const model::LlamaConfig& cfg, Device device) {
  const auto units = model::llama_units(cfg);
  auto p = std::make_unique<model::LocalParams>(units, DType::F32, device);
  const ckpt::SafetensorsFolder folder(golden_dir());
  for (int u = 0; u < int(units.size()); ++u) {
    Tensor host = Tensor::empty({units[size_t(u)].numel}, DType::F32);
    ckpt::load_hf_unit(folder, units[size_t(u)], host);
    p->params(u).copy_(host);
  }
  return p;
}

// Feeds ids (B rows of T, host) to a fresh decoder in chunks of the given sizes: every
// row's logits, [B*T, V] on the host in (b, t) order.
Tensor decoder_logits(model::LlamaDecoder& dec, model::ParamProvider& params, const Tensor& ids,
                      const std::vector<int64_t>& chunks) {
  const int64_t B = ids.size(0), T = ids.size(1), V = dec.config().vocab_size;
  Tensor all = Tensor::empty({B * T, V}, DType::F32);
  dec.reset();
  int64_t pos = 0;
  for (int64_t n : chunks) {
    const Tensor chunk = ids.narrow(1, pos, n).to(dec.device());  // packed and uploaded
    const Tensor logits = dec.forward(chunk, params, /*all_rows=*/true).to(Device::cpu());
    for (int64_t b = 0; b < B; ++b) all.narrow(0, b * T + pos, n).copy_(logits.narrow(0, b * n, n));
    pos += n;
  }
  EXPECT_EQ(pos, T);
  EXPECT_EQ(dec.position(), T);
  return all;
}

double worst_row_error(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t r = 0; r < a.size(0); ++r) worst = std::max(worst, rel_error(a.select(0, r), b.select(0, r)));
  return worst;
}

TEST_F(CudaOps, LlamaDecoderOnCudaEqualsTheForwardPassAndTheCpuDecoder) {
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(golden_dir());
  const int64_t B = 2, T = 13;
  Tensor ids = Tensor::empty({B, T}, DType::I32);
  std::mt19937_64 rng(77);
  for (int64_t i = 0; i < B * T; ++i) ids.set_flat(i, double(rng() % uint64_t(cfg.vocab_size)));

  const auto pg = golden_params(cfg, kGpu);
  model::Llama llama(cfg, DType::F32, kGpu);
  model::LlamaActivations act(cfg, B, T, DType::F32, kGpu);
  act.ids.copy_(ids.reshape({B * T}));
  act.targets.fill_(double(kIgnoreIndex));
  llama.forward(act, *pg);
  const Tensor full = act.logits.to(Device::cpu());

  model::LlamaDecoder dec(cfg, B, 16, 6, DType::F32, kGpu);
  EXPECT_EQ(dec.device(), kGpu);
  const Tensor got = decoder_logits(dec, *pg, ids, {6, 1, 5, 1});
  const double vs_forward = worst_row_error(got, full);
  EXPECT_LT(vs_forward, kDecodeTolerance);

  const auto pc = golden_params(cfg, Device::cpu());
  model::LlamaDecoder cpu(cfg, B, 16, 6);
  const double vs_cpu = worst_row_error(got, decoder_logits(cpu, *pc, ids, {6, 1, 5, 1}));
  EXPECT_LT(vs_cpu, kDecodeTolerance);
  std::printf("CUDA decoder: vs the CUDA forward %.2e, vs the CPU decoder %.2e (tolerance %.0e)\n", vs_forward, vs_cpu,
              kDecodeTolerance);
}

TEST_F(CudaOps, LlamaGreedyGenerationOnCudaEqualsTransformers) {
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(golden_dir());
  const auto pg = golden_params(cfg, kGpu);
  std::ifstream in(golden_dir() + "/greedy_generate.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const int32_t eos = fixture["eos_token_id"].get<int32_t>();
  ASSERT_EQ(fixture["cases"].size(), 5u);
  for (const auto& c : fixture["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = c["expected_ids"].get<std::vector<int32_t>>();
    // Chunks of 8: a prompt longer than that is prefilled over several calls.
    model::LlamaDecoder dec(cfg, 1, cfg.max_seq_len, std::min<int64_t>(8, cfg.max_seq_len), DType::F32, kGpu);
    model::Sampler greedy(model::SamplingOptions{.temperature = 0});
    const auto r = model::generate(dec, *pg, prompt, greedy, c["max_new_tokens"].get<int64_t>(), eos);
    EXPECT_EQ(r.tokens, expected) << "prompt of " << prompt.size() << " tokens";
  }
}

}  // namespace
}  // namespace fsdp::test
