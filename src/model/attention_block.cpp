// The attention sublayer over the op set; see attention_block.h for the math. Every tensor
// touched here is a view of a saved or scratch buffer or of a unit's flat buffer, so
// nothing is allocated per call.
#include "fsdp/model/attention_block.h"

#include "fsdp/ops/attention.h"
#include "fsdp/ops/attention_decode.h"
#include "fsdp/ops/elementwise.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::model {

AttentionSaved::AttentionSaved(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev, bool with_lse) {
  bind(c, B, T, dt, allocate_on(dev), with_lse);
}

// Under tensor parallelism the norm's rows are this rank's N / T (Note [Sequence
// parallelism]) and q|k|v, the attention output and its statistics are this rank's heads
// over all N rows.
void AttentionSaved::bind(const LlamaConfig& c, int64_t B, int64_t T, DType dt, const SavedBinder& b, bool with_lse) {
  const int64_t N = B * T, rows = N / c.tensor_parallel;
  const DType st = stat_dtype(dt);
  b(h1, {"attention h1", {rows, c.hidden_size}, dt, SavedKind::Cheap});
  b(rstd1, {"attention rstd1", {rows}, st, SavedKind::Cheap});
  b(qkv, {"attention qkv", {N, c.local_qkv_dim()}, dt, SavedKind::Expensive});
  b(att, {"attention att", {N, c.local_q_dim()}, dt, SavedKind::Expensive});
  if (with_lse) b(lse, {"attention lse", {B, c.local_heads(), T}, st, SavedKind::Expensive});
}

AttentionGrads::AttentionGrads(const LlamaConfig& c, int64_t N, DType dt, Device dev) {
  bind(c, N, dt, allocate_on(dev));
}

void AttentionGrads::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  b(dqkv, {"attention dqkv", {N, c.local_qkv_dim()}, dt, SavedKind::Cheap});
  b(datt, {"attention datt", {N, c.local_q_dim()}, dt, SavedKind::Cheap});
}

AttentionSublayer::AttentionSublayer(const LlamaConfig& cfg, const UnitLayout& block, RopeTables rope,
                                     const SequenceParallel* sp)
    : cfg_(cfg),
      sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      rope_(std::move(rope)),
      norm_(block, block.name + ".attn_norm"),
      qkv_(block, {block.name + ".wq", block.name + ".wk", block.name + ".wv"}),
      o_(block, {block.name + ".wo"}) {}

// q, k, v as [B, T, heads, D] views of the fused [N, qkv_dim] buffer (this tensor rank's
// heads: its query heads and the key/value heads of their GQA groups, which the layout
// keeps together).
AttentionSublayer::QKV AttentionSublayer::split_heads(const Tensor& qkv, int64_t B, int64_t T) const {
  const LlamaConfig& c = cfg_;
  const int64_t D = c.head_dim(), q = c.local_q_dim(), kv = c.local_kv_dim();
  const Tensor x = qkv.reshape({B, T, c.local_qkv_dim()});
  return QKV{x.narrow(2, 0, q).unflatten(2, c.local_heads(), D), x.narrow(2, q, kv).unflatten(2, c.local_kv_heads(), D),
             x.narrow(2, q + kv, kv).unflatten(2, c.local_kv_heads(), D)};
}

AttentionSublayer::QKV AttentionSublayer::project(const Tensor& x, const UnitParams& p, const Tensor& h,
                                                  const Tensor& rstd, const Tensor& qkv, int64_t B, int64_t T,
                                                  int64_t pos, const Tensor& doc_start) const {
  rmsnorm_forward(x, norm_.value(p), h, rstd, cfg_.norm_eps);
  qkv_.forward(sp_->gather(h), p, qkv);  // column-parallel: every rank's rows of h
  const QKV heads = split_heads(qkv, B, T);
  rope_forward(heads.q, heads.q, rope_, pos, doc_start);
  rope_forward(heads.k, heads.k, rope_, pos, doc_start);
  return heads;
}

void AttentionSublayer::forward(const Tensor& x, const UnitParams& p, AttentionSaved& s, const Tensor& out,
                                int64_t B, int64_t T, const Tensor& doc_start) const {
  const QKV heads = project(x, p, s.h1, s.rstd1, s.qkv, B, T, 0, doc_start);
  attention_forward(heads.q, heads.k, heads.v, s.att.reshape({B, T, cfg_.local_heads(), cfg_.head_dim()}), s.lse,
                    doc_start);
  sp_->scatter(o_, s.att, p, x, out);  // out = x + att @ Wo^T (row-parallel: reduce-scattered to this rank's rows)
}

void AttentionSublayer::recompute_cheap(const Tensor& x, const UnitParams& p, AttentionSaved& s) const {
  rmsnorm_forward(x, norm_.value(p), s.h1, s.rstd1, cfg_.norm_eps);
}

void AttentionSublayer::backward(const Tensor& x, const AttentionSaved& s, const UnitParams& p, const Tensor& dres,
                                 const Tensor& dh, AttentionGrads& g, int64_t B, int64_t T,
                                 const Tensor& doc_start) const {
  const LlamaConfig& c = cfg_;
  o_.backward(sp_->scatter_backward(dres), s.att, p, g.datt);  // d(out) on every rank's rows
  const QKV qkv = split_heads(s.qkv, B, T);
  const QKV dqkv = split_heads(g.dqkv, B, T);
  attention_backward(g.datt.reshape({B, T, c.local_heads(), c.head_dim()}), qkv.q, qkv.k, qkv.v,
                     s.att.reshape({B, T, c.local_heads(), c.head_dim()}), s.lse, dqkv.q, dqkv.k, dqkv.v, doc_start);
  rope_backward(dqkv.q, dqkv.q, rope_, 0, doc_start);
  rope_backward(dqkv.k, dqkv.k, rope_, 0, doc_start);
  const Tensor dh_all = sp_->partial_for(dh);
  qkv_.backward(g.dqkv, sp_->gather(s.h1), p, dh_all);  // h gathered again: See Note [Sequence parallelism]
  sp_->gather_backward(dh_all, dh);
  rmsnorm_backward(dh, x, norm_.value(p), s.rstd1, dres, norm_.grad(p), /*accumulate_dx=*/true);
}

void AttentionSublayer::forward_cached(const Tensor& x, const UnitParams& p, AttentionSaved& scratch,
                                       const KVCache& cache, int layer, int64_t B, int64_t T) const {
  const int64_t N = B * T;
  const Tensor att = scratch.att.narrow(0, 0, N);
  const QKV heads = project(x, p, scratch.h1.narrow(0, 0, N), scratch.rstd1.narrow(0, 0, N),
                            scratch.qkv.narrow(0, 0, N), B, T, cache.length, Tensor());
  attention_decode(heads.q, heads.k, heads.v, cache.layer_k(layer), cache.layer_v(layer), cache.length,
                   att.reshape({B, T, cfg_.num_heads, cfg_.head_dim()}));
  o_.forward(att, p, x, /*accumulate=*/true);  // x += att @ Wo^T
}

}  // namespace fsdp::model
