// Inference with a KV cache: the Llama forward of llama.h for T new tokens at absolute
// positions pos .. pos+T-1 of B sequences, each block's keys and values appended to a
// KVCache so that the next call only computes its own tokens.
//
//   per block:  h = rmsnorm(x) ; q|k|v = h @ Wqkv^T ; rope(q, k) at offset pos
//               a = attention_decode(q, k, v -> cache, pos) ; x += a @ Wo^T
//               h = rmsnorm(x) ; g|u = h @ Wgu^T ; x += swiglu(g, u) @ Wdown^T
//   head:       logits = rmsnorm(x) @ Wlm^T   (every row, or each sequence's last row only)
//
// The same ops and the same parameter units (param_units.h) as Llama::forward, so logits
// agree with it to float32 round-off whether the sequence arrives in one call (prefill) or
// one token at a time. Parameters come from a ParamProvider, unit by unit, exactly as in
// training: LocalParams for generation in one process.
// Every buffer (cache and scratch for up to max_chunk tokens per sequence) is allocated in
// the constructor; forward allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/kv_cache.h"
#include "fsdp/model/llama.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/ops/rope.h"

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

 private:
  struct Scratch {
    Tensor x, h, rstd, qkv, att, gu, act;  // [B*max_chunk, ...]
    Tensor hf, rstdf, logits;              // final norm and logits, [B*max_chunk, ...]
  };
  void block_forward(int layer, const Tensor& flat, int64_t T);

  LlamaConfig cfg_;
  DType dtype_;
  Device device_;
  std::vector<UnitLayout> units_;
  std::vector<Llama::BlockOffsets> blocks_;
  int64_t head_lm_ = 0, head_norm_ = 0;
  int64_t max_chunk_ = 0;
  RopeTables rope_;
  KVCache cache_;
  Scratch s_;
};

}  // namespace fsdp::model
