// The key/value cache of autoregressive decoding: every layer's rotated keys and its values
// for the positions decoded so far, so a new token attends to them without recomputing them.
//   k, v: [layers, B, kv_heads, max_len, head_dim], allocated once and never resized.
// Layer l is k.select(0, l) = [B, KVH, max_len, D], the layout attention_decode reads: each
// kv head's positions are contiguous rows of D, so one query row scans one block of memory.
// Positions [0, length) are filled; rows past length are never read (so never initialised).
// All sequences of the batch share the same length.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

struct KVCache {
  Tensor k, v;
  int64_t length = 0;  // positions filled, the absolute position of the next token

  KVCache() = default;
  KVCache(const LlamaConfig& c, int64_t batch, int64_t max_len, DType dtype, Device device)
      : k(Tensor::empty({c.num_layers, batch, c.num_kv_heads, max_len, c.head_dim()}, dtype, device)),
        v(Tensor::empty({c.num_layers, batch, c.num_kv_heads, max_len, c.head_dim()}, dtype, device)) {}

  int64_t batch() const { return k.size(1); }
  int64_t max_len() const { return k.size(3); }
  Tensor layer_k(int64_t layer) const { return k.select(0, layer); }
  Tensor layer_v(int64_t layer) const { return v.select(0, layer); }
  // Forgets every position; the memory is kept (stale rows are never read past length).
  void clear() { length = 0; }
};

}  // namespace fsdp::model
