// Causal self-attention with grouped-query attention (GQA), softmax scale 1/sqrt(D):
//   q: [B, T, H, D];  k, v: [B, T, KVH, D] with H % KVH == 0; query head h reads kv head
//   h / (H / KVH) (Hugging Face's repeat_kv order). out: [B, T, H, D].
//   lse: [B, H, T] float32 (float64 for float64 inputs), the log-sum-exp of each softmax row,
//   saved so backward recomputes the probabilities instead of storing [T, T] per head.
// All of q, k, v, out, dout, dq, dk, dv have their last two dims packed (stride(3) == 1,
// stride(2) == D) and may be strided in dims 0-1 (views into a fused qkv buffer).
// Backward overwrites dq, dk, dv (dk/dv sum the contributions of the query heads that
// share a kv head).
//
// Note [Document masking]
// A row may hold several documents packed back to back (SFT examples, or a pretraining
// window split at EOS). doc_start, when defined, describes them: int32 [B, T], contiguous,
// on q's device, doc_start[b, t] = the position in row b where token t's document begins.
// So doc_start[b, 0] = 0 and doc_start[b, t] is either t (a document starts at t) or
// doc_start[b, t - 1]: the cu_seqlens of flash-attn's varlen kernels, spelled out per token
// so that any range of a row (a tile, a sequence-parallel shard) carries its own bounds.
// Query i then attends key j iff doc_start[b, i] <= j <= i (block-causal): the keys of a
// tile wholly before its first query's document are never computed, only tiles that
// straddle a boundary are masked, and a row of 4 equal documents costs about 1/4 of the
// causal work. RoPE takes the same tensor (rope.h: positions restart at each document).
// Undefined doc_start: plain causal attention, the same bits as before it existed.
// make_doc_start builds it from each row's document offsets and checks them; the front
// end checks a host tensor's invariant, a device one is trusted (its producer checked it).
#pragma once

#include <cstdint>
#include <span>

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& doc_start = Tensor());
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& doc_start = Tensor());

// The doc_start of Note [Document masking] for B rows of T tokens, on the host: row b's
// documents begin at starts[first[b]] .. starts[first[b + 1] - 1] (offsets in [0, T),
// strictly increasing, the first 0; first has B + 1 entries). Errors name the row.
Tensor make_doc_start(std::span<const int32_t> starts, std::span<const int64_t> first, int64_t T);
// Checks a host doc_start's invariant (Note [Document masking]); `what` names it.
void check_doc_start(const Tensor& doc_start, const char* what);

using attention_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
using attention_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(attention_forward_fn, attention_forward_stub);
FSDP_DECLARE_DISPATCH(attention_backward_fn, attention_backward_stub);

}  // namespace fsdp
