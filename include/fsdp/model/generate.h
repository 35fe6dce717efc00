// Autoregressive generation: prefill the prompt into a LlamaDecoder's KV cache, then
// sample one token at a time, feeding each back, until EOS or the token budget. The loop
// `fsdp_train generate` runs and the tests check against transformers' generate: like
// it, an EOS token that is generated is part of the output and ends it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "fsdp/model/llama_decode.h"
#include "fsdp/model/sampling.h"

namespace fsdp::model {

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the prompt not included), EOS included if hit
  bool hit_eos = false;
  bool hit_max_len = false;     // stopped because the decoder's cache was full
  double prefill_seconds = 0;   // feeding the prompt and choosing the first token
  double decode_seconds = 0;    // every later token
};

// Batch 1: `decoder` must have batch() == 1; it is reset first. The prompt (non-empty,
// ids < vocab) is fed in chunks of decoder.max_chunk() tokens. Generates at most
// max_new_tokens, and at most max_len - prompt + 1 (the last token is never fed back);
// eos_id < 0: never stops early. on_token, when set, sees each id as soon as it is chosen.
// A decoder on a CUDA device gets its ids uploaded per call and each step's logits read
// back for the sampler (which runs on the host).
GenerateResult generate(LlamaDecoder& decoder, ParamProvider& params, std::span<const int32_t> prompt,
                        Sampler& sampler, int64_t max_new_tokens, int32_t eos_id,
                        const std::function<void(int32_t)>& on_token = {});
// The same, stopping at the first token in `stop_ids` (a chat model's end-of-turn tokens and
// EOS, as transformers' eos_token_id list; hit_eos then says one was generated); empty:
// never stops early.
GenerateResult generate(LlamaDecoder& decoder, ParamProvider& params, std::span<const int32_t> prompt,
                        Sampler& sampler, int64_t max_new_tokens, std::span<const int32_t> stop_ids,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace fsdp::model
