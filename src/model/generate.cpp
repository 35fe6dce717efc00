// The generation loop of include/fsdp/model/generate.h.
#include "fsdp/model/generate.h"

#include <algorithm>
#include <chrono>

#include "fsdp/core/error.h"

namespace fsdp::model {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One row of float32 logits (CPU) as a span for the sampler.
std::span<const float> row(const Tensor& logits) {
  return {logits.data<float>(), size_t(logits.size(1))};
}

// The logits as the sampler reads them, float32 on the host: themselves when they are,
// else a copy (a device decoder's row is read back here, the one wait per token).
Tensor host_f32(const Tensor& logits) {
  return logits.device().is_cpu() && logits.dtype() == DType::F32 ? logits : logits.to(Device::cpu(), DType::F32);
}

}  // namespace

GenerateResult generate(LlamaDecoder& dec, ParamProvider& params, std::span<const int32_t> prompt, Sampler& sampler,
                        int64_t max_new_tokens, int32_t eos_id, const std::function<void(int32_t)>& on_token) {
  if (eos_id < 0) return generate(dec, params, prompt, sampler, max_new_tokens, std::span<const int32_t>{}, on_token);
  const int32_t stop[] = {eos_id};
  return generate(dec, params, prompt, sampler, max_new_tokens, std::span<const int32_t>(stop), on_token);
}

GenerateResult generate(LlamaDecoder& dec, ParamProvider& params, std::span<const int32_t> prompt, Sampler& sampler,
                        int64_t max_new_tokens, std::span<const int32_t> stop_ids,
                        const std::function<void(int32_t)>& on_token) {
  FSDP_CHECK(dec.batch() == 1, "generate: the decoder must have batch 1, got {}", dec.batch());
  FSDP_CHECK(!prompt.empty(), "generate: the prompt is empty (at least one token, e.g. BOS, is needed)");
  const int64_t P = int64_t(prompt.size()), V = dec.config().vocab_size;
  FSDP_CHECK(P <= dec.max_len(), "generate: the prompt has {} tokens, more than the model's {} positions", P,
             dec.max_len());
  for (int64_t i = 0; i < P; ++i)
    FSDP_CHECK(prompt[size_t(i)] >= 0 && prompt[size_t(i)] < V,
               "generate: prompt token {} at position {} is outside the vocabulary of {}", prompt[size_t(i)], i, V);
  FSDP_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got {}", max_new_tokens);

  GenerateResult r;
  dec.reset();
  const auto t0 = std::chrono::steady_clock::now();
  if (max_new_tokens == 0) return r;
  // Token buffers: the largest prompt chunk, and the one token fed back per step; written
  // on the host and, for a decoder on a device, uploaded into their device twins.
  const Device dev = dec.device();
  Tensor chunk = Tensor::empty({std::min(P, dec.max_chunk())}, DType::I32);
  Tensor one = Tensor::empty({1, 1}, DType::I32);
  const Tensor chunk_dev = dev.is_cpu() ? chunk : Tensor::empty(chunk.sizes(), DType::I32, dev);
  const Tensor one_dev = dev.is_cpu() ? one : Tensor::empty(one.sizes(), DType::I32, dev);
  Tensor logits;
  for (int64_t i = 0; i < P; i += dec.max_chunk()) {
    const int64_t n = std::min(dec.max_chunk(), P - i);
    const Tensor ids = chunk.narrow(0, 0, n).reshape({1, n});
    std::copy_n(prompt.data() + i, n, ids.data<int32_t>());
    const Tensor ids_dev = chunk_dev.narrow(0, 0, n).reshape({1, n});
    if (!dev.is_cpu()) ids_dev.copy_(ids);
    logits = dec.forward(ids_dev, params);
  }
  const int64_t budget = std::min(max_new_tokens, dec.max_len() - P + 1);
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < budget; ++i) {
    if (i > 0) {
      one.data<int32_t>()[0] = r.tokens.back();
      if (!dev.is_cpu()) one_dev.copy_(one);
      logits = dec.forward(one_dev, params);
    }
    const Tensor host = host_f32(logits);
    const int32_t tok = sampler.sample(row(host), uint64_t(i));
    r.tokens.push_back(tok);
    if (i == 0) {
      r.prefill_seconds = seconds_since(t0);
      t1 = std::chrono::steady_clock::now();
    }
    if (on_token) on_token(tok);
    if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end()) {
      r.hit_eos = true;
      break;
    }
  }
  r.decode_seconds = seconds_since(t1);
  r.hit_max_len = !r.hit_eos && int64_t(r.tokens.size()) < max_new_tokens;
  return r;
}

}  // namespace fsdp::model
