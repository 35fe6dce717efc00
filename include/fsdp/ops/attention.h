// Causal self-attention with grouped-query attention (GQA), softmax scale 1/sqrt(D):
//   q: [B, T, H, D];  k, v: [B, T, KVH, D] with H % KVH == 0; query head h reads kv head
//   h / (H / KVH) (Hugging Face's repeat_kv order). out: [B, T, H, D].
//   lse: [B, H, T] float32 (float64 for float64 inputs), the log-sum-exp of each softmax row,
//   saved so backward recomputes the probabilities instead of storing [T, T] per head.
// All of q, k, v, out, dout, dq, dk, dv have their last two dims packed (stride(3) == 1,
// stride(2) == D) and may be strided in dims 0-1 (views into a fused qkv buffer).
// Backward overwrites dq, dk, dv (dk/dv sum the contributions of the query heads that
// share a kv head).
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv);

using attention_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
using attention_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(attention_forward_fn, attention_forward_stub);
FSDP_DECLARE_DISPATCH(attention_backward_fn, attention_backward_stub);

}  // namespace fsdp
