// The decoder's forward and backward over its parts; see the file-top comment of
// decoder.h for the math. Every tensor touched here is a view of a buffer in
// LlamaActivations or of a unit's flat buffer, so this file allocates nothing per step.
#include "fsdp/model/decoder.h"

#include "fsdp/core/memory_category.h"
#include "fsdp/model/rope_scaling.h"
#include "fsdp/ops/cross_entropy.h"

namespace fsdp::model {

LlamaActivations::LlamaActivations(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev,
                                   ActivationCheckpointing ac)
    : batch(B), seq_len(T), checkpointing(ac) {
  const int64_t N = B * T, C = c.hidden_size;
  // The buffers' shapes are the block's business (its MLP kind among them): ask one block
  // built on this config's layout. Its RoPE tables are never used.
  const TransformerBlock block(c, llama_units(c)[block_unit(0)], RopeTables{});
  {
    const memory::CategoryScope tag("batch");
    ids = Tensor::empty({N}, DType::I32, dev);
    targets = Tensor::empty({N}, DType::I32, dev);
  }
  FSDP_CHECK(ac.every >= 0, "activation checkpointing every {} blocks: must be >= 0", ac.every);
  bool any = false;
  kept_router.resize(size_t(c.num_layers));
  // Memory categories (fsdp/core/memory_category.h): what block l saves for its backward,
  // its input resid[l] included, is "activations/layers.l".
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const memory::CategoryScope tag(fmt::format("activations/layers.{}", l));
    resid.push_back(Tensor::empty({N, C}, dt, dev));
    blocks.push_back(ac.checkpointed(l) ? BlockActivations{} : block.make_activations(B, T, dt, dev));
    if (!ac.checkpointed(l)) continue;
    any = true;
    if (c.is_moe()) {
      kept_router[size_t(l)].prob_sum = Tensor::empty({c.num_experts}, stat_dtype(dt), dev);
      kept_router[size_t(l)].lse_sq_sum = Tensor::empty({1}, stat_dtype(dt), dev);
    }
  }
  {
    const memory::CategoryScope tag("scratch/activation recompute");
    if (any) recompute = block.make_activations(B, T, dt, dev);
  }
  {
    const memory::CategoryScope tag("activations/head");
    resid.push_back(Tensor::empty({N, C}, dt, dev));
    hf = Tensor::empty({N, C}, dt, dev);
    rstdf = Tensor::empty({N}, stat_dtype(dt), dev);
    logits = Tensor::empty({N, c.vocab_size}, dt, dev);
    losses = Tensor::empty({N}, stat_dtype(dt), dev);
  }
  const memory::CategoryScope tag("scratch/backward");
  grads = block.make_grads(N, dt, dev);
}

BlockActivations& LlamaActivations::saved(int64_t l) {
  return checkpointing.checkpointed(l) ? recompute : blocks[size_t(l)];
}

const BlockActivations& LlamaActivations::saved(int64_t l) const {
  return checkpointing.checkpointed(l) ? recompute : blocks[size_t(l)];
}

namespace {

// A checkpointed MoE block's routing statistics, copied out of the shared scratch.
void keep_router_record(const BlockActivations& from, RouterRecord& into) {
  const RouterRecord* r = from.mlp->router();
  if (r == nullptr) return;
  into.prob_sum.copy_(r->prob_sum);
  into.lse_sq_sum.copy_(r->lse_sq_sum);
  into.count = r->count;
  into.tokens = r->tokens;
}

LlamaConfig validated(const LlamaConfig& c) {
  c.validate();
  return c;
}

}  // namespace

Llama::Llama(const LlamaConfig& cfg, DType dtype, Device device)
    : cfg_(validated(cfg)),
      dtype_(dtype),
      device_(device),
      units_(llama_units(cfg_)),
      embedding_(cfg_),
      head_(cfg_, units_) {
  // Computed on the host (in double, rounded once) and moved once.
  const memory::CategoryScope tag("constants/rope tables");
  const RopeTables rope = llama_rope_tables(cfg_, cfg_.max_seq_len, device_);
  for (int l = 0; l < int(cfg_.num_layers); ++l) blocks_.emplace_back(cfg_, units_[block_unit(l)], rope);
}

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
  LossSum r = sum_losses(losses, targets);
  const RouterLosses router = router_losses(a);
  r.router_aux = router.aux;
  r.router_z = router.z;
  r.micro_batches = 1;
  return r;
}

std::vector<const RouterRecord*> Llama::router_records(const LlamaActivations& a) const {
  std::vector<const RouterRecord*> records;
  for (int64_t l = 0; l < int64_t(a.blocks.size()); ++l)
    records.push_back(a.checkpointing.checkpointed(l) ? &a.kept_router[size_t(l)] : a.blocks[size_t(l)].mlp->router());
  return records;
}

RouterLosses Llama::router_losses(const LlamaActivations& a) const {
  if (!cfg_.is_moe()) return {};
  return model::router_losses(cfg_, router_records(a));
}

// Embedding and blocks: the part of the forward pass both entry points share. On return
// a.resid[L] holds the final hidden state and the head has not run.
void Llama::trunk_forward(LlamaActivations& a, ParamProvider& p) {
  FSDP_CHECK(a.seq_len <= cfg_.max_seq_len, "sequence length {} exceeds model.max_seq_len {}", a.seq_len,
             cfg_.max_seq_len);
  p.before_forward(embedding_unit());
  embedding_.forward(a.ids, p.params(embedding_unit()), a.resid[0]);
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    p.before_forward(block_unit(l));
    blocks_[size_t(l)].forward(a.resid[size_t(l)], p.params(block_unit(l)), a.saved(l), a.resid[size_t(l) + 1],
                               a.batch, a.seq_len);
    if (a.checkpointing.checkpointed(l) && cfg_.is_moe()) keep_router_record(a.recompute, a.kept_router[size_t(l)]);
    p.after_forward(block_unit(l));
  }
}

LossSum Llama::forward(LlamaActivations& a, ParamProvider& p) {
  trunk_forward(a, p);
  const int h = head_unit(cfg_), w = head_.weight_unit();
  head_.before_forward(p);
  head_.forward(a.resid[size_t(cfg_.num_layers)], p.params(h), p.params(w), a.hf, a.rstdf, a.logits);
  cross_entropy_forward(a.logits, a.targets, a.losses);
  head_.after_forward(p);
  p.finish();
  return loss_sum(a);
}

LossSum Llama::forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale, double router_scale) {
  enqueue_forward_backward(a, p, grad_scale, router_scale);
  return loss_sum(a);
}

// The head runs forward and backward back to back: its parameters stay in place and the
// logits buffer receives its own gradient (no second [N, V] tensor). On return
// a.grads.dres holds dL/d(final hidden state).
void Llama::head_backward(LlamaActivations& a, ParamProvider& p, double grad_scale) {
  const int h = head_unit(cfg_), w = head_.weight_unit();
  const Tensor& x = a.resid[size_t(cfg_.num_layers)];
  head_.before_forward(p);
  head_.forward(x, p.params(h), p.params(w), a.hf, a.rstdf, a.logits);
  cross_entropy_forward_backward(a.logits, a.targets, a.losses, a.logits, grad_scale);
  head_.after_forward(p);
  head_.before_backward(p);
  head_.backward(a.logits, x, a.hf, a.rstdf, UnitBuffers{p.params(h), p.grads(h)},
                 UnitBuffers{p.params(w), p.grads(w)}, a.grads.dh, a.grads.dres);
  head_.after_backward(p);
}

void Llama::enqueue_forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale,
                                     double router_scale) {
  trunk_forward(a, p);
  // The router losses' gradient is known once every layer has routed: the same for every
  // layer's backward (the loss-scale factor of grad_scale is the caller's to include).
  if (cfg_.is_moe()) router_loss_grad(cfg_, router_records(a), router_scale, a.grads.mlp->router_loss);
  head_backward(a, p, grad_scale);
  for (int l = int(cfg_.num_layers) - 1; l >= 0; --l) {
    p.before_backward(block_unit(l));
    if (a.checkpointing.checkpointed(l)) {
      // The forward again, now that the unit is gathered for backward: the same inputs and
      // parameters give the same activations (and the same block output, written again).
      blocks_[size_t(l)].forward(a.resid[size_t(l)], p.params(block_unit(l)), a.recompute, a.resid[size_t(l) + 1],
                                 a.batch, a.seq_len);
    }
    blocks_[size_t(l)].backward(a.resid[size_t(l)], a.saved(l), p.params(block_unit(l)),
                                p.grads(block_unit(l)), a.grads, a.batch, a.seq_len);
    p.after_backward(block_unit(l));
  }
  p.before_backward(embedding_unit());
  embedding_.backward(a.ids, a.grads.dres, p.grads(embedding_unit()));
  p.after_backward(embedding_unit());
  p.finish();
  // The losses are read by the caller, after all of this is enqueued: on a device the host
  // waits once, for the whole pass, instead of stalling the backward behind a read-back.
}

}  // namespace fsdp::model
