// The decoder's forward and backward over its parts; see the file-top comment of
// decoder.h for the math. Every tensor touched here is a view of a buffer in
// LlamaActivations or of a unit's flat buffer, so this file allocates nothing per step.
#include "fsdp/model/decoder.h"

#include "fsdp/core/random.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/rope.h"

namespace fsdp::model {

LlamaActivations::LlamaActivations(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev,
                                   ActivationCheckpointing ac)
    : batch(B), seq_len(T), checkpointing(ac) {
  const int64_t N = B * T, C = c.hidden_size;
  // The buffers' shapes are the block's business (its MLP kind among them): ask one block
  // built on this config's layout. Its RoPE tables are never used.
  const TransformerBlock block(c, llama_units(c)[block_unit(0)], RopeTables{});
  ids = Tensor::empty({N}, DType::I32, dev);
  targets = Tensor::empty({N}, DType::I32, dev);
  for (int64_t l = 0; l <= c.num_layers; ++l) resid.push_back(Tensor::empty({N, C}, dt, dev));
  FSDP_CHECK(ac.every >= 0, "activation checkpointing every {} blocks: must be >= 0", ac.every);
  bool any = false;
  kept_router.resize(size_t(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    blocks.push_back(ac.checkpointed(l) ? BlockActivations{} : block.make_activations(B, T, dt, dev));
    if (!ac.checkpointed(l)) continue;
    any = true;
    if (c.is_moe()) {
      kept_router[size_t(l)].prob_sum = Tensor::empty({c.num_experts}, stat_dtype(dt), dev);
      kept_router[size_t(l)].lse_sq_sum = Tensor::empty({1}, stat_dtype(dt), dev);
    }
  }
  if (any) recompute = block.make_activations(B, T, dt, dev);
  hf = Tensor::empty({N, C}, dt, dev);
  rstdf = Tensor::empty({N}, stat_dtype(dt), dev);
  logits = Tensor::empty({N, c.vocab_size}, dt, dev);
  losses = Tensor::empty({N}, stat_dtype(dt), dev);
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

// The model's RoPE tables: computed on the host (in double, rounded once) and moved once.
RopeTables device_rope_tables(const LlamaConfig& c, Device device) {
  RopeTables t = make_rope_tables(c.max_seq_len, c.head_dim(), c.rope_theta, Device::cpu());
  if (!device.is_cpu()) t = RopeTables{t.cos.to(device), t.sin.to(device)};
  return t;
}

LlamaConfig validated(const LlamaConfig& c) {
  c.validate();
  return c;
}

// Dense frozen weights are stored in the compute dtype.
PeftSpec in_dtype(PeftSpec p, DType dtype) {
  p.frozen_dtype = dtype;
  return p;
}

// The purpose word of LoRA's dropout stream (random.h: every stream is (seed, purpose, ...)).
constexpr uint64_t kLoraDropoutPurpose = 0x10a4d40u;

}  // namespace

Llama::Llama(const LlamaConfig& cfg, DType dtype, Device device, const PeftSpec& peft, uint64_t dropout_seed)
    : cfg_(validated(cfg)),
      dtype_(dtype),
      device_(device),
      peft_(in_dtype(peft, dtype)),
      dropout_key_(mix_key(dropout_seed, kLoraDropoutPurpose)),
      units_(lora_units(cfg_, peft_)),
      embedding_(units_[embedding_unit()]),
      head_(cfg_, units_[head_unit(cfg_)]) {
  const RopeTables rope = device_rope_tables(cfg_, device_);
  for (int l = 0; l < int(cfg_.num_layers); ++l) blocks_.emplace_back(cfg_, units_[block_unit(l)], rope);
  for (const UnitLayout& u : units_)
    for (const FrozenSlot& f : u.frozen) needs_scratch_ = needs_scratch_ || f.format == FrozenFormat::Nf4;
  needs_scratch_ = needs_scratch_ || peft_.lora.enabled;
}

LinearScratch* Llama::scratch_for(const LlamaActivations& a, bool training) {
  if (!needs_scratch_) return nullptr;
  // Rows a Linear sees: a micro-batch's tokens (an expert gets at most every token once).
  const int64_t rows = a.batch * a.seq_len;
  if (scratch_.rows < rows) scratch_ = make_linear_scratch(units_, rows, dtype_, device_);
  scratch_.training = training;
  scratch_.dropout_key = dropout_key_;
  scratch_.first_row = a.first_sample * a.seq_len;
  return &scratch_;
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
// The scratch (scratch_for) must be set up for the pass before.
void Llama::trunk_forward(LlamaActivations& a, ParamProvider& p) {
  FSDP_CHECK(a.seq_len <= cfg_.max_seq_len, "sequence length {} exceeds model.max_seq_len {}", a.seq_len,
             cfg_.max_seq_len);
  LinearScratch* scratch = needs_scratch_ ? &scratch_ : nullptr;
  p.before_forward(embedding_unit());
  embedding_.forward(a.ids, p.forward_view(embedding_unit()), a.resid[0]);
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    p.before_forward(block_unit(l));
    blocks_[size_t(l)].forward(a.resid[size_t(l)], p.forward_view(block_unit(l), scratch), a.saved(l),
                               a.resid[size_t(l) + 1], a.batch, a.seq_len);
    if (a.checkpointing.checkpointed(l) && cfg_.is_moe()) keep_router_record(a.recompute, a.kept_router[size_t(l)]);
    p.after_forward(block_unit(l));
  }
}

LossSum Llama::forward(LlamaActivations& a, ParamProvider& p) {
  LinearScratch* scratch = scratch_for(a, /*training=*/false);
  trunk_forward(a, p);
  const int h = head_unit(cfg_);
  p.before_forward(h);
  head_.forward(a.resid[size_t(cfg_.num_layers)], p.forward_view(h, scratch), a.hf, a.rstdf, a.logits);
  cross_entropy_forward(a.logits, a.targets, a.losses);
  p.after_forward(h);
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
  const int h = head_unit(cfg_);
  LinearScratch* scratch = needs_scratch_ ? &scratch_ : nullptr;
  const Tensor& x = a.resid[size_t(cfg_.num_layers)];
  p.before_forward(h);
  head_.forward(x, p.forward_view(h, scratch), a.hf, a.rstdf, a.logits);
  cross_entropy_forward_backward(a.logits, a.targets, a.losses, a.logits, grad_scale);
  p.after_forward(h);
  p.before_backward(h);
  head_.backward(a.logits, x, a.hf, a.rstdf, p.backward_view(h, scratch), a.grads.dh, a.grads.dres);
  p.after_backward(h);
}

void Llama::enqueue_forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale,
                                     double router_scale) {
  LinearScratch* scratch = scratch_for(a, /*training=*/true);
  trunk_forward(a, p);
  // The router losses' gradient is known once every layer has routed: the same for every
  // layer's backward (the loss-scale factor of grad_scale is the caller's to include).
  if (cfg_.is_moe()) router_loss_grad(cfg_, router_records(a), router_scale, a.grads.mlp->router_loss);
  if (embedding_.frozen()) p.skip_backward(embedding_unit());
  head_backward(a, p, grad_scale);
  for (int l = int(cfg_.num_layers) - 1; l >= 0; --l) {
    p.before_backward(block_unit(l));
    if (a.checkpointing.checkpointed(l)) {
      // The forward again, now that the unit is gathered for backward: the same inputs and
      // parameters give the same activations (and the same block output, written again).
      blocks_[size_t(l)].forward(a.resid[size_t(l)], p.forward_view(block_unit(l), scratch), a.recompute,
                                 a.resid[size_t(l) + 1], a.batch, a.seq_len);
    }
    blocks_[size_t(l)].backward(a.resid[size_t(l)], a.saved(l), p.backward_view(block_unit(l), scratch), a.grads,
                                a.batch, a.seq_len);
    p.after_backward(block_unit(l));
  }
  // A frozen table needs no gradient and nothing below it needs one: its backward, and its
  // gather for backward, are skipped (skip_backward was said before the backward began).
  if (!embedding_.frozen()) {
    p.before_backward(embedding_unit());
    embedding_.backward(a.ids, a.grads.dres, p.backward_view(embedding_unit()));
    p.after_backward(embedding_unit());
  }
  p.finish();
  // The losses are read by the caller, after all of this is enqueued: on a device the host
  // waits once, for the whole pass, instead of stalling the backward behind a read-back.
}

}  // namespace fsdp::model
