// The decoder's forward and backward over its parts; see the file-top comment of
// decoder.h for the math. Every tensor touched here is a view of a buffer in
// LlamaActivations or of a unit's flat buffer, so this file allocates nothing per step.
#include "fsdp/model/decoder.h"

#include "fsdp/core/memory_category.h"
#include "fsdp/core/random.h"
#include "fsdp/model/activation_offload.h"
#include "fsdp/model/rope_scaling.h"
#include "fsdp/ops/cross_entropy.h"  // kIgnoreIndex

namespace fsdp::model {

namespace {

LlamaConfig validated(const LlamaConfig& c, const TensorGroup* tensor, const ExpertGroup* expert) {
  c.validate();
  const int group = tensor != nullptr ? tensor->size() : 1;
  FSDP_CHECK(c.tensor_parallel == group, "the model is split over {} tensor ranks but its tensor group has {}",
             c.tensor_parallel, group);
  const int experts = expert != nullptr ? expert->size() : 1;
  FSDP_CHECK(c.expert_parallel == experts, "the model's experts are split over {} ranks but its expert group has {}",
             c.expert_parallel, experts);
  return c;
}

// Dense frozen weights are stored in the compute dtype.
PeftSpec in_dtype(PeftSpec p, DType dtype) {
  p.frozen_dtype = dtype;
  return p;
}

// The rows' documents for attention and RoPE: undefined (plain causal) unless the batch
// has them. The recompute of a checkpointed block reads the same tensor as its forward.
Tensor documents(const LlamaActivations& a) { return a.documents ? a.doc_start : Tensor(); }

// The purpose word of LoRA's dropout stream (random.h: every stream is (seed, purpose, ...)).
constexpr uint64_t kLoraDropoutPurpose = 0x10a4d40u;

}  // namespace

Llama::Llama(const LlamaConfig& cfg, DType dtype, Device device, const PeftSpec& peft, uint64_t dropout_seed,
             TensorGroup* tensor, ExpertGroup* expert)
    : cfg_(validated(cfg, tensor, expert)),
      dtype_(dtype),
      device_(device),
      sp_(std::make_unique<SequenceParallel>(cfg.tensor_parallel > 1 ? tensor : nullptr)),
      ep_(std::make_unique<ExpertDispatch>(cfg_, cfg_.expert_units() ? expert : nullptr)),
      peft_(in_dtype(peft, dtype)),
      dropout_key_(mix_key(dropout_seed, kLoraDropoutPurpose)),
      units_(lora_units(cfg_, peft_, sp_->rank(), ep_->rank())),
      embedding_(units_[embedding_unit()], sp_.get()),
      head_(cfg_, units_, sp_.get()) {
  // Computed on the host (in double, rounded once) and moved once.
  const memory::CategoryScope tag("constants/rope tables");
  const RopeTables rope = llama_rope_tables(cfg_, cfg_.max_seq_len, device_);
  if (cfg_.is_moe()) router_bias_ = std::make_shared<RouterBias>(cfg_.num_layers, cfg_.num_experts, device_);
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    const int x = expert_unit(cfg_, l);
    blocks_.emplace_back(cfg_, units_[block_unit(l)], rope, sp_.get(), RouterBiasRef{router_bias_, l}, ep_.get(),
                         x >= 0 ? &units_[size_t(x)] : nullptr);
  }
  for (const UnitLayout& u : units_)
    for (const FrozenSlot& f : u.frozen) needs_scratch_ = needs_scratch_ || f.format == FrozenFormat::Nf4;
  needs_scratch_ = needs_scratch_ || peft_.lora.enabled;
}

void Llama::use_scratch(LlamaActivations& a) {
  if (sp_->on()) sp_->use(a.tp_gathered, a.tp_partial, &a.tp_stats);
  if (ep_->on()) ep_->use(a.ep_staging, a.ep_grouped);
}

UnitParams Llama::block_view(ParamProvider& p, int l, LinearScratch* scratch, bool backward) const {
  UnitParams v = backward ? p.backward_view(block_unit(l), scratch) : p.forward_view(block_unit(l), scratch);
  if (const int x = expert_unit(cfg_, l); x >= 0) {
    v.expert_params = p.params(x);
    v.expert_frozen = p.frozen(x);
    if (backward) v.expert_grads = p.grads(x);
  }
  return v;
}

LinearScratch* Llama::scratch_for(const LlamaActivations& a, bool training) {
  if (!needs_scratch_) return nullptr;
  // Rows a Linear sees: a micro-batch's tokens (an expert gets at most every token once;
  // under expert parallelism every token of every rank of its group).
  const int64_t rows = a.batch * a.seq_len * (cfg_.expert_units() ? cfg_.expert_parallel : 1);
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
  for (const BlockActivations& b : a.blocks) records.push_back(b.mlp->router());
  return records;
}

RouterLosses Llama::router_losses(const LlamaActivations& a) const {
  if (!cfg_.is_moe()) return {};
  return model::router_losses(cfg_, router_records(a));
}

// Embedding and blocks: the part of the forward pass both entry points share. On return
// a.resid[L] holds the final hidden state and the head has not run.
// The scratch (scratch_for) must be set up for the pass before.
void Llama::trunk_forward(LlamaActivations& a, ParamProvider& p, bool for_backward) {
  FSDP_CHECK(a.seq_len <= cfg_.max_seq_len, "sequence length {} exceeds model.max_seq_len {}", a.seq_len,
             cfg_.max_seq_len);
  LinearScratch* scratch = needs_scratch_ ? &scratch_ : nullptr;
  ActivationOffload* off = a.offload.get();
  const ActivationCheckpointing& ac = a.checkpointing;
  p.before_forward(embedding_unit());
  if (off) off->before_write(0);  // block 0 is always checkpointed
  embedding_.forward(a.ids, p.forward_view(embedding_unit()), a.resid[0]);
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    const int x = expert_unit(cfg_, l);  // expert parallelism: the block's experts, gathered beside it
    p.before_forward(block_unit(l));
    if (x >= 0) p.before_forward(x);
    if (off && l + 1 < cfg_.num_layers && ac.checkpointed(l + 1)) off->before_write(l + 1);
    blocks_[size_t(l)].forward(a.resid[size_t(l)], block_view(p, l, scratch, false), a.blocks[size_t(l)],
                               a.resid[size_t(l) + 1], a.batch, a.seq_len, documents(a));
    if (off && for_backward && ac.checkpointed(l)) off->stash(l);
    if (x >= 0) p.after_forward(x);
    p.after_forward(block_unit(l));
  }
}

LossSum Llama::forward(LlamaActivations& a, ParamProvider& p) {
  LinearScratch* scratch = scratch_for(a, /*training=*/false);
  use_scratch(a);
  trunk_forward(a, p, /*for_backward=*/false);
  const int h = head_unit(cfg_), w = head_.weight_unit();
  head_.before_forward(p);
  head_.forward(a.resid[size_t(cfg_.num_layers)], p.forward_view(h, scratch), p.forward_view(w, scratch), a.hf,
                a.rstdf, a.logits);
  head_.loss(a.logits, a.targets, a.losses, Tensor(), 1.0);
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
  LinearScratch* scratch = needs_scratch_ ? &scratch_ : nullptr;
  const Tensor& x = a.resid[size_t(cfg_.num_layers)];
  head_.before_forward(p);
  head_.forward(x, p.forward_view(h, scratch), p.forward_view(w, scratch), a.hf, a.rstdf, a.logits);
  head_.loss(a.logits, a.targets, a.losses, a.logits, grad_scale);
  head_.after_forward(p);
  head_.before_backward(p);
  head_.backward(a.logits, x, a.hf, a.rstdf, p.backward_view(h, scratch), p.backward_view(w, scratch), a.grads.dh,
                 a.grads.dres);
  head_.after_backward(p);
}

// The blocks' backward, last to first; a checkpointed block's activations are recomputed
// first (after its offloaded tensors are back), while its unit is gathered for backward.
// LoRA keeps nothing of its own between forward and backward (lora_adapter.h: u and the
// dropped-out input are recomputed from the Linear's input, which the block saved), so
// recompute and offloading cover adapters through the blocks' own saved tensors.
void Llama::blocks_backward(LlamaActivations& a, ParamProvider& p) {
  LinearScratch* scratch = needs_scratch_ ? &scratch_ : nullptr;
  ActivationOffload* off = a.offload.get();
  const ActivationCheckpointing& ac = a.checkpointing;
  for (int l = int(cfg_.num_layers) - 1; l >= 0; --l) {
    // Backward reverses forward's order of uses: the expert unit, then its block.
    const int x = expert_unit(cfg_, l);
    if (x >= 0) p.before_backward(x);
    p.before_backward(block_unit(l));
    const UnitParams params = block_view(p, l, scratch, true);
    BlockActivations& saved = a.blocks[size_t(l)];
    if (ac.checkpointed(l)) {
      if (off) off->fetch(l);
      blocks_[size_t(l)].recompute(a.resid[size_t(l)], params, saved, a.recompute_output(l), ac.mode, a.batch,
                                   a.seq_len, documents(a));
    }
    blocks_[size_t(l)].backward(a.resid[size_t(l)], saved, params, a.grads, a.batch, a.seq_len, documents(a));
    if (off && ac.checkpointed(l)) off->release(l);
    if (x >= 0) p.after_backward(x);
    p.after_backward(block_unit(l));
  }
}

void Llama::enqueue_forward_backward(LlamaActivations& a, ParamProvider& p, double grad_scale,
                                     double router_scale) {
  scratch_for(a, /*training=*/true);
  use_scratch(a);
  trunk_forward(a, p, /*for_backward=*/true);
  // The router losses' gradient is known once every layer has routed: the same for every
  // layer's backward (the loss-scale factor of grad_scale is the caller's to include).
  // Every tensor rank routed all N tokens, so each adds 1/T of it: the sums over the tensor
  // group count it once (Note [Experts under tensor parallelism] in mlp_moe.h).
  if (cfg_.is_moe())
    router_loss_grad(cfg_, router_records(a), router_scale / double(sp_->size()), a.grads.mlp->router_loss);
  // A frozen table needs no gradient and nothing below it needs one: its backward, and its
  // gather for backward, are skipped (said before the backward begins). A tied head still
  // reads the frozen table in its backward (dx = dlogits W), so then the hooks run and the
  // embedding's own backward computes nothing.
  const bool skip_embedding = embedding_.frozen() && head_.weight_unit() != embedding_unit();
  if (skip_embedding) p.skip_backward(embedding_unit());
  if (a.offload) a.offload->begin_backward();  // the last blocks come back while the head runs
  head_backward(a, p, grad_scale);
  blocks_backward(a, p);
  if (!skip_embedding) {
    p.before_backward(embedding_unit());
    embedding_.backward(a.ids, a.grads.dres, p.backward_view(embedding_unit()));
    p.after_backward(embedding_unit());
  }
  p.finish();
  // The losses are read by the caller, after all of this is enqueued: on a device the host
  // waits once, for the whole pass, instead of stalling the backward behind a read-back.
}

}  // namespace fsdp::model
