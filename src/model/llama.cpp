// Llama forward and backward over the op set; see the file-top comment of llama.h for
// the math. Every tensor touched here is a view of a buffer in LlamaActivations or of a
// unit's flat buffer, so this file allocates nothing per step.
#include "fsdp/model/llama.h"

#include "fsdp/ops/attention.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/elementwise.h"
#include "fsdp/ops/embedding.h"
#include "fsdp/ops/matmul.h"
#include "fsdp/ops/rmsnorm.h"
#include "fsdp/ops/rope.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::model {

namespace {

// The fused projection weights of a block, as views of its flat buffer. Relies on the
// adjacency param_units.cpp guarantees: wq|wk|wv and w_gate|w_up are contiguous. Offsets
// come from BlockOffsets resolved once at construction, so the step does no name lookups.
struct BlockWeights {
  Tensor wqkv, wo, wgu, wdown, attn_norm, mlp_norm;
};

BlockWeights block_weights(const LlamaConfig& c, const Llama::BlockOffsets& o, const Tensor& flat) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  BlockWeights w;
  w.wqkv = flat.narrow(0, o.wq, c.qkv_dim() * C).reshape({c.qkv_dim(), C});
  w.wo = flat.narrow(0, o.wo, C * c.q_dim()).reshape({C, c.q_dim()});
  w.wgu = flat.narrow(0, o.w_gate, 2 * F * C).reshape({2 * F, C});
  w.wdown = flat.narrow(0, o.w_down, C * F).reshape({C, F});
  w.attn_norm = flat.narrow(0, o.attn_norm, C);
  w.mlp_norm = flat.narrow(0, o.mlp_norm, C);
  return w;
}

// q, k, v as [B, T, heads, D] views of the fused [N, qkv_dim] buffer.
struct QKV {
  Tensor q, k, v;
};

QKV split_qkv(const LlamaConfig& c, const Tensor& qkv, int64_t B, int64_t T) {
  const int64_t D = c.head_dim();
  const Tensor x = qkv.reshape({B, T, c.qkv_dim()});
  return QKV{x.narrow(2, 0, c.q_dim()).unflatten(2, c.num_heads, D),
             x.narrow(2, c.q_dim(), c.kv_dim()).unflatten(2, c.num_kv_heads, D),
             x.narrow(2, c.q_dim() + c.kv_dim(), c.kv_dim()).unflatten(2, c.num_kv_heads, D)};
}

}  // namespace

LlamaActivations::LlamaActivations(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev)
    : batch(B), seq_len(T) {
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size;
  // rstd / lse / losses stay float32 for float32 and bf16 compute (float64 for tests).
  const DType stat = dt == DType::F64 ? DType::F64 : DType::F32;
  ids = Tensor::empty({N}, DType::I32, dev);
  targets = Tensor::empty({N}, DType::I32, dev);
  for (int64_t l = 0; l <= c.num_layers; ++l) resid.push_back(Tensor::empty({N, C}, dt, dev));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    BlockActivations b;
    b.h1 = Tensor::empty({N, C}, dt, dev);
    b.rstd1 = Tensor::empty({N}, stat, dev);
    b.qkv = Tensor::empty({N, c.qkv_dim()}, dt, dev);
    b.att = Tensor::empty({N, c.q_dim()}, dt, dev);
    b.lse = Tensor::empty({B, c.num_heads, T}, stat, dev);
    b.x2 = Tensor::empty({N, C}, dt, dev);
    b.h2 = Tensor::empty({N, C}, dt, dev);
    b.rstd2 = Tensor::empty({N}, stat, dev);
    b.gu = Tensor::empty({N, 2 * F}, dt, dev);
    b.act = Tensor::empty({N, F}, dt, dev);
    blocks.push_back(std::move(b));
  }
  hf = Tensor::empty({N, C}, dt, dev);
  rstdf = Tensor::empty({N}, stat, dev);
  logits = Tensor::empty({N, c.vocab_size}, dt, dev);
  losses = Tensor::empty({N}, stat, dev);
  dres = Tensor::empty({N, C}, dt, dev);
  dh = Tensor::empty({N, C}, dt, dev);
  dqkv = Tensor::empty({N, c.qkv_dim()}, dt, dev);
  datt = Tensor::empty({N, c.q_dim()}, dt, dev);
  dgu = Tensor::empty({N, 2 * F}, dt, dev);
  dact = Tensor::empty({N, F}, dt, dev);
}

Llama::Llama(const LlamaConfig& cfg, DType dtype, Device device)
    : cfg_(cfg), dtype_(dtype), device_(device), units_(llama_units(cfg)) {
  cfg_.validate();
  // The tables are computed on the host (in double, rounded once) and moved once.
  rope_ = make_rope_tables(cfg_.max_seq_len, cfg_.head_dim(), cfg_.rope_theta, Device::cpu());
  if (!device_.is_cpu()) rope_ = RopeTables{rope_.cos.to(device_), rope_.sin.to(device_)};
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    const UnitLayout& u = units_[block_unit(l)];
    const std::string p = u.name + ".";
    FSDP_CHECK(u.slot(p + "wk").offset == u.slot(p + "wq").offset + cfg_.q_dim() * cfg_.hidden_size &&
                   u.slot(p + "wv").offset == u.slot(p + "wk").offset + cfg_.kv_dim() * cfg_.hidden_size &&
                   u.slot(p + "w_up").offset == u.slot(p + "w_gate").offset + cfg_.intermediate_size * cfg_.hidden_size,
               "unit layout of {} breaks the fused q|k|v and gate|up adjacency", u.name);
    blocks_.push_back(BlockOffsets{u.slot(p + "wq").offset, u.slot(p + "wo").offset, u.slot(p + "w_gate").offset,
                                   u.slot(p + "w_down").offset, u.slot(p + "attn_norm").offset,
                                   u.slot(p + "mlp_norm").offset});
  }
  const UnitLayout& h = units_[head_unit(cfg_)];
  head_lm_ = h.slot("lm_head").offset;
  head_norm_ = h.slot("norm").offset;
}

void Llama::block_forward(int layer, LlamaActivations& a, const Tensor& flat) {
  const LlamaConfig& c = cfg_;
  const int64_t B = a.batch, T = a.seq_len, F = c.intermediate_size;
  BlockActivations& s = a.blocks[layer];
  const BlockWeights w = block_weights(c, blocks_[layer], flat);
  const Tensor& x = a.resid[layer];

  rmsnorm_forward(x, w.attn_norm, s.h1, s.rstd1, c.norm_eps);
  matmul(s.h1, w.wqkv, s.qkv, false, true);
  const QKV qkv = split_qkv(c, s.qkv, B, T);
  rope_forward(qkv.q, qkv.q, rope_, 0);
  rope_forward(qkv.k, qkv.k, rope_, 0);
  attention_forward(qkv.q, qkv.k, qkv.v, s.att.reshape({B, T, c.num_heads, c.head_dim()}), s.lse);
  cast(x, s.x2);  // x2 = x + att @ Wo^T, the residual add folded into the GEMM's beta
  matmul(s.att, w.wo, s.x2, false, true, 1.0, 1.0);

  rmsnorm_forward(s.x2, w.mlp_norm, s.h2, s.rstd2, c.norm_eps);
  matmul(s.h2, w.wgu, s.gu, false, true);
  swiglu_forward(s.gu.narrow(1, 0, F), s.gu.narrow(1, F, F), s.act);
  const Tensor& out = a.resid[layer + 1];
  cast(s.x2, out);
  matmul(s.act, w.wdown, out, false, true, 1.0, 1.0);
}

// On entry a.dres holds dL/d(block output); on exit dL/d(block input).
void Llama::block_backward(int layer, LlamaActivations& a, const Tensor& flat, const Tensor& grad) {
  const LlamaConfig& c = cfg_;
  const int64_t B = a.batch, T = a.seq_len, F = c.intermediate_size;
  const BlockActivations& s = a.blocks[layer];
  const BlockWeights w = block_weights(c, blocks_[layer], flat);
  const BlockWeights g = block_weights(c, blocks_[layer], grad);
  const Tensor& x = a.resid[layer];

  // MLP: out = x2 + act @ Wdown^T
  matmul(a.dres, s.act, g.wdown, true, false, 1.0, 1.0);
  matmul(a.dres, w.wdown, a.dact, false, false);
  swiglu_backward(a.dact, s.gu.narrow(1, 0, F), s.gu.narrow(1, F, F), a.dgu.narrow(1, 0, F),
                  a.dgu.narrow(1, F, F));
  matmul(a.dgu, s.h2, g.wgu, true, false, 1.0, 1.0);
  matmul(a.dgu, w.wgu, a.dh, false, false);
  rmsnorm_backward(a.dh, s.x2, w.mlp_norm, s.rstd2, a.dres, g.mlp_norm, /*accumulate_dx=*/true);

  // Attention: x2 = x + att @ Wo^T
  matmul(a.dres, s.att, g.wo, true, false, 1.0, 1.0);
  matmul(a.dres, w.wo, a.datt, false, false);
  const QKV qkv = split_qkv(c, s.qkv, B, T);
  const QKV dqkv = split_qkv(c, a.dqkv, B, T);
  attention_backward(a.datt.reshape({B, T, c.num_heads, c.head_dim()}), qkv.q, qkv.k, qkv.v,
                     s.att.reshape({B, T, c.num_heads, c.head_dim()}), s.lse, dqkv.q, dqkv.k, dqkv.v);
  rope_backward(dqkv.q, dqkv.q, rope_, 0);
  rope_backward(dqkv.k, dqkv.k, rope_, 0);
  matmul(a.dqkv, s.h1, g.wqkv, true, false, 1.0, 1.0);
  matmul(a.dqkv, w.wqkv, a.dh, false, false);
  rmsnorm_backward(a.dh, x, w.attn_norm, s.rstd1, a.dres, g.attn_norm, /*accumulate_dx=*/true);
}

void Llama::head_forward(LlamaActivations& a, const Tensor& flat) {
  rmsnorm_forward(a.resid[cfg_.num_layers], head_norm(flat), a.hf, a.rstdf, cfg_.norm_eps);
  matmul(a.hf, head_lm(flat), a.logits, false, true);
}

Tensor Llama::embedding_table(const Tensor& flat) const {
  return flat.narrow(0, 0, cfg_.vocab_size * cfg_.hidden_size).reshape({cfg_.vocab_size, cfg_.hidden_size});
}

Tensor Llama::head_lm(const Tensor& flat) const {
  return flat.narrow(0, head_lm_, cfg_.vocab_size * cfg_.hidden_size).reshape({cfg_.vocab_size, cfg_.hidden_size});
}

Tensor Llama::head_norm(const Tensor& flat) const { return flat.narrow(0, head_norm_, cfg_.hidden_size); }

LossSum sum_losses(const Tensor& losses, const Tensor& targets) {
  // Summed on the host in double, in row order: the loss is reproducible to the bit, the
  // same on every backend given the same per-token losses.
  FSDP_CHECK(losses.device().is_cpu() && targets.device().is_cpu() && losses.numel() == targets.numel(),
             "sum_losses: host losses and targets of one length, got {} and {}", losses.str(), targets.str());
  LossSum r;
  for (int64_t i = 0; i < losses.numel(); ++i) {
    if (targets.get_flat(i) == double(kIgnoreIndex)) continue;
    r.sum += losses.get_flat(i);
    ++r.tokens;
  }
  return r;
}

LossSum Llama::loss_sum(const LlamaActivations& a) const {
  // On a device the [N] losses and targets are read back here: the call's one wait for the
  // device (the first copy waits for the step's kernels, the second finds the stream idle).
  const Tensor losses = a.losses.device().is_cpu() ? a.losses : a.losses.to(Device::cpu());
  const Tensor targets = a.targets.device().is_cpu() ? a.targets : a.targets.to(Device::cpu());
  return sum_losses(losses, targets);
}

// Embedding and blocks: the part of the forward pass both entry points share. On return
// a.resid[L] holds the final hidden state and the head has not run.
void Llama::trunk_forward(LlamaActivations& a, ParamProvider& p) {
  FSDP_CHECK(a.seq_len <= cfg_.max_seq_len, "sequence length {} exceeds model.max_seq_len {}", a.seq_len,
             cfg_.max_seq_len);
  p.before_forward(embedding_unit());
  embedding_forward(a.ids, embedding_table(p.params(embedding_unit())), a.resid[0]);
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    p.before_forward(block_unit(l));
    block_forward(l, a, p.params(block_unit(l)));
    p.after_forward(block_unit(l));
  }
}

LossSum Llama::forward(LlamaActivations& a, ParamProvider& p) {
  trunk_forward(a, p);
  const int h = head_unit(cfg_);
  p.before_forward(h);
  head_forward(a, p.params(h));
  cross_entropy_forward(a.logits, a.targets, a.losses);
  p.after_forward(h);
  p.finish();
  return loss_sum(a);
}

LossSum Llama::forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale) {
  enqueue_forward_backward(a, p, grad_scale);
  return loss_sum(a);
}

void Llama::enqueue_forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale) {
  trunk_forward(a, p);

  // The head runs forward and backward back to back: its parameters stay in place and
  // the logits buffer receives its own gradient (no second [N, V] tensor).
  const int h = head_unit(cfg_);
  p.before_forward(h);
  const Tensor hflat = p.params(h);
  head_forward(a, hflat);
  cross_entropy_forward_backward(a.logits, a.targets, a.losses, a.logits, grad_scale);
  p.after_forward(h);
  p.before_backward(h);
  const Tensor hgrad = p.grads(h);
  matmul(a.logits, a.hf, head_lm(hgrad), true, false, 1.0, 1.0);
  matmul(a.logits, head_lm(hflat), a.dh, false, false);
  rmsnorm_backward(a.dh, a.resid[cfg_.num_layers], head_norm(hflat), a.rstdf, a.dres, head_norm(hgrad),
                   /*accumulate_dx=*/false);
  p.after_backward(h);

  for (int l = int(cfg_.num_layers) - 1; l >= 0; --l) {
    p.before_backward(block_unit(l));
    block_backward(l, a, p.params(block_unit(l)), p.grads(block_unit(l)));
    p.after_backward(block_unit(l));
  }

  p.before_backward(embedding_unit());
  embedding_backward(a.ids, a.dres, embedding_table(p.grads(embedding_unit())));
  p.after_backward(embedding_unit());
  p.finish();
  // The losses are read by the caller, after all of this is enqueued: on a device the host
  // waits once, for the whole pass, instead of stalling the backward behind a read-back.
}

}  // namespace fsdp::model
