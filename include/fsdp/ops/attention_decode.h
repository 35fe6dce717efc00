// Causal GQA attention of new query rows against a KV cache, the decode-time counterpart
// of attention_forward (same math, same head mapping, softmax scale 1/sqrt(D)):
//   1. append:  k_cache[b, g, pos + t, :] = k_new[b, t, g, :], likewise v, for t < T
//   2. attend:  for query row t (absolute position pos + t) and query head h, with kv head
//               g = h / (H / KVH) (Hugging Face's repeat_kv order),
//                 s_j = q[b, t, h, :] . k_cache[b, g, j, :] / sqrt(D)   for j <= pos + t
//                 out[b, t, h, :] = sum_j softmax(s)_j v_cache[b, g, j, :]
// Shapes:  q, out [B, T, H, D];  k_new, v_new [B, T, KVH, D];  k_cache, v_cache [B, KVH, S, D]
// with pos + T <= S. q, out, k_new, v_new have their last two dims packed and may be strided
// in dims 0-1 (views into the fused qkv buffer); the caches have their last two dims packed
// (one layer of a [layers, B, KVH, S, D] buffer, each kv head's positions contiguous).
// With pos = 0 and T the whole sequence this equals attention_forward's out (no lse is
// produced: nothing is differentiated at decode time).
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void attention_decode(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                      const Tensor& v_cache, int64_t pos, const Tensor& out);

using attention_decode_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     int64_t, const Tensor&);
FSDP_DECLARE_DISPATCH(attention_decode_fn, attention_decode_stub);

}  // namespace fsdp
