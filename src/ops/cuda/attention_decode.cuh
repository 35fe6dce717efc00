// Launcher of decode-time attention against a KV cache (attention_decode.cu), called by
// attention_decode.cpp. Plain C++ on the host side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention.cuh"

namespace fsdp::cuda {

// q, k_new, v_new, out: [B, T, heads, D] as HeadsView (sh = D); k_cache, v_cache:
// [B, KVH, S, D] read as keys: s0 = stride(0), st = D (positions), sh = stride(1).
struct DecodeArgs {
  HeadsView q, k_new, v_new, k_cache, v_cache, out;
  int64_t B, T, H, KVH, D;
  int64_t pos;
};

// Query rows per call from which the tiled flash kernel of attention.cu (with the cache as
// k and v, queries at pos ..) beats a block per query row: a prefill.
constexpr int64_t kDecodeTiledRows = 16;

void launch_attention_decode(DType t, const DecodeArgs& a, cudaStream_t stream);

}  // namespace fsdp::cuda
