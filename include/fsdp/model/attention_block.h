// The attention sublayer of a transformer block, forward and backward side by side:
//
//   h1 = rmsnorm(x) ; q|k|v = Linear_qkv(h1) ; rope(q, k) ; att = attention(q, k, v)
//   out = x + Linear_o(att)
//
// on N = B*T rows of B sequences of T tokens. What forward saves for backward is named in
// AttentionSaved; backward turns dL/d(out) into dL/dx (the residual's share plus the
// sublayer's) and adds the parameter gradients into the unit's gradient buffer. forward
// reads only x and the parameters and writes only `saved` and `out`, so it can run again
// inside backward (activation checkpointing) and give the same bits.
// forward_cached is the inference form (generation with a KV cache): RoPE at the cache's
// position, attention over the cached keys and values, nothing saved.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/kv_cache.h"
#include "fsdp/model/linear.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/saved_tensors.h"
#include "fsdp/model/sequence_parallel.h"
#include "fsdp/model/unit_params.h"
#include "fsdp/ops/rope.h"

namespace fsdp::model {

// Saved by the attention sublayer's forward for its backward (one set per block).
// qkv holds q and k after RoPE, which rotates them in place: the backward reads only the
// rotated q and k (attention's backward), never the unrotated ones (RoPE's backward rotates
// dq and dk back and needs only the tables), so keeping qkv keeps RoPE's result and nothing
// of RoPE is ever recomputed (Note [Saved tensors]: qkv is Expensive, the GEMM's output).
struct AttentionSaved {
  Tensor h1;     // [N, C]   rmsnorm(x)                                   Cheap
  Tensor rstd1;  // [N]      its 1/rms (stat dtype)                       Cheap
  Tensor qkv;    // [N, qkv_dim] rotated q and k, and v                   Expensive
  Tensor att;    // [N, q_dim]   attention output, heads concatenated     Expensive
  Tensor lse;    // [B, H, T]    softmax log-sum-exp (stat dtype); undefined at inference  Expensive

  AttentionSaved() = default;
  // with_lse false: inference scratch (no backward, lse never written).
  AttentionSaved(const LlamaConfig& c, int64_t batch, int64_t seq_len, DType dtype, Device device,
                 bool with_lse = true);
  // Each member to `bind`, in member order (Note [Saved tensors]).
  void bind(const LlamaConfig& c, int64_t batch, int64_t seq_len, DType dtype, const SavedBinder& bind,
            bool with_lse = true);
};

// The attention sublayer's backward scratch, shared by every block (backward runs one
// block at a time).
struct AttentionGrads {
  Tensor dqkv;  // [N, qkv_dim]
  Tensor datt;  // [N, q_dim]

  AttentionGrads() = default;
  AttentionGrads(const LlamaConfig& c, int64_t rows, DType dtype, Device device);
  void bind(const LlamaConfig& c, int64_t rows, DType dtype, const SavedBinder& bind);
};

class AttentionSublayer {
 public:
  // Resolves the sublayer's slots (attn_norm, wq|wk|wv, wo) in a block's unit layout. With
  // tensor parallelism (cfg.tensor_parallel > 1) `sp` joins the rank's heads to the
  // residual stream's rows (Note [Sequence parallelism]); null: none.
  AttentionSublayer(const LlamaConfig& cfg, const UnitLayout& block, RopeTables rope,
                    const SequenceParallel* sp = nullptr);

  // out = x + attention(x) over B sequences of T tokens (x, out: [B*T, C]; out != x).
  // doc_start (int32 [B, T] or undefined): the rows' documents, which attend only within
  // themselves and whose RoPE positions restart (Note [Document masking] in
  // fsdp/ops/attention.h). Under tensor parallelism q|k|v cover every row of the sequence
  // (the gathered h), so the whole doc_start applies as is.
  void forward(const Tensor& x, const UnitParams& p, AttentionSaved& s, const Tensor& out, int64_t B, int64_t T,
               const Tensor& doc_start = Tensor()) const;
  // Selective checkpointing: the Cheap members of `s` again (h1 and rstd1, from x), the
  // same bits as the forward wrote; the Expensive ones are s's own, kept from the forward.
  void recompute_cheap(const Tensor& x, const UnitParams& p, AttentionSaved& s) const;
  // On entry dres = dL/d(out); on exit dres = dL/dx. dh is [N, C] scratch. Parameter
  // gradients go into p.grads.
  void backward(const Tensor& x, const AttentionSaved& s, const UnitParams& p, const Tensor& dres, const Tensor& dh,
                AttentionGrads& g, int64_t B, int64_t T, const Tensor& doc_start = Tensor()) const;
  // Inference: x += attention(x) for T new tokens per sequence at positions cache.length ..,
  // their keys and values appended to layer `layer` of the cache (cache.length is not
  // advanced here). `scratch` may hold more rows than x.
  void forward_cached(const Tensor& x, const UnitParams& p, AttentionSaved& scratch, const KVCache& cache, int layer,
                      int64_t B, int64_t T) const;

 private:
  // h = rmsnorm(x), qkv = Linear_qkv(h) with q and k rotated from position pos; returns
  // the q, k, v views of qkv as [B, T, heads, D].
  struct QKV {
    Tensor q, k, v;
  };
  QKV project(const Tensor& x, const UnitParams& p, const Tensor& h, const Tensor& rstd, const Tensor& qkv,
              int64_t B, int64_t T, int64_t pos, const Tensor& doc_start) const;
  QKV split_heads(const Tensor& qkv, int64_t B, int64_t T) const;

  LlamaConfig cfg_;
  const SequenceParallel* sp_;
  RopeTables rope_;
  ParamRef norm_;  // attn_norm
  Linear qkv_, o_;
};

}  // namespace fsdp::model
