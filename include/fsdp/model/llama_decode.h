// Inference with a KV cache: the decoder's forward (decoder.h) for T new tokens at absolute
// positions pos .. pos+T-1 of B sequences, each block's keys and values appended to a
// KVCache so that the next call only computes its own tokens.
//
//   per block:  x += attention(rmsnorm(x)) with RoPE at offset pos, attending to the cache
//               x += mlp(rmsnorm(x))
//   head:       logits = rmsnorm(x) @ Wlm^T   (every row, or each sequence's last row only)
//
// The very same parts as training (TransformerBlock::forward_cached, TokenEmbedding,
// OutputHead) over the same parameter units (param_units.h), so logits agree with
// Llama::forward to float32 round-off whether the sequence arrives in one call (prefill)
// or one token at a time. The residual stream is updated in place: nothing is saved for a
// backward pass. Parameters come from a ParamProvider, unit by unit, exactly as in
// training: LocalParams for generation in one process.
// Every buffer (cache and scratch for up to max_chunk tokens per sequence) is allocated in
// the constructor; forward allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/kv_cache.h"
#include "fsdp/model/embed_and_head.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/transformer_block.h"

namespace fsdp::model {

class LlamaDecoder {
 public:
  // Room for `batch` sequences of up to max_len positions (<= cfg.max_seq_len), fed at most
  // max_chunk tokens per sequence per call (a longer prompt is fed in several calls).
  LlamaDecoder(const LlamaConfig& cfg, int64_t batch, int64_t max_len, int64_t max_chunk, DType dtype = DType::F32,
               Device device = Device::cpu());

  const LlamaConfig& config() const { return cfg_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  Device device() const { return device_; }  // where ids, parameters and logits live
  int64_t batch() const { return cache_.batch(); }
  int64_t max_len() const { return cache_.max_len(); }
  int64_t max_chunk() const { return max_chunk_; }
  int64_t position() const { return cache_.length; }  // tokens already in the cache
  const KVCache& cache() const { return cache_; }
  void reset() { cache_.clear(); }

  // Runs ids [B, T] (int32, contiguous, on device(); 1 <= T <= max_chunk, position() + T
  // <= max_len) at positions position() .. position()+T-1 and advances position() by T.
  // Returns logits [B*T, V] (row b*T + t) when all_rows, else [B, V] for each sequence's
  // last token: a view of a buffer the next call overwrites.
  Tensor forward(const Tensor& ids, ParamProvider& params, bool all_rows = false);
  // A mixture of experts' routing biases (router_bias.h; set them to route as the trained
  // model did); null for a dense model.
  RouterBias* router_bias() { return router_bias_.get(); }

 private:
  LlamaConfig cfg_;
  DType dtype_;
  Device device_;
  std::vector<UnitLayout> units_;
  TokenEmbedding embedding_;
  std::shared_ptr<RouterBias> router_bias_;  // shared with every block's MoE MLP
  std::vector<TransformerBlock> blocks_;
  OutputHead head_;
  int64_t max_chunk_ = 0;
  KVCache cache_;
  // [B*max_chunk, ...] buffers: the residual stream, every block's scratch (blocks run one
  // at a time), the final norm and the logits.
  Tensor x_;
  BlockActivations block_scratch_;
  Tensor hf_, rstdf_, logits_;
};

}  // namespace fsdp::model
