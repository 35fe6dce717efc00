// The decoder's embedding and output head over the op set; see embed_and_head.h.
#include "fsdp/model/embed_and_head.h"

#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/embedding.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::model {

TokenEmbedding::TokenEmbedding(const UnitLayout& embedding, const SequenceParallel* sp)
    : table_(embedding, "tok_embeddings"),
      sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      vocab_size_(embedding.find("tok_embeddings").trainable != nullptr
                      ? embedding.slot("tok_embeddings").whole_shape()[0]
                      : embedding.frozen_slot("tok_embeddings").whole_shape()[0]) {}

void TokenEmbedding::forward(const Tensor& ids, const UnitParams& p, const Tensor& out) const {
  if (!sp_->on()) return embedding_forward(ids, table_.value(p), out);
  vocab_parallel_embedding_forward(ids, table_.value(p), vocab_size_, sp_->group(), sp_->partial_for(out), out);
}

void TokenEmbedding::backward(const Tensor& ids, const Tensor& dout, const UnitParams& p) const {
  if (table_.frozen()) return;
  if (!sp_->on()) return embedding_backward(ids, dout, table_.grad(p));
  vocab_parallel_embedding_backward(ids, dout, table_.grad(p), vocab_size_, sp_->group(), sp_->gathered_for(dout));
}

namespace {

// Wlm: lm_head in the head unit, or the embedding table itself when tied.
Linear lm_head_of(const LlamaConfig& cfg, const std::vector<UnitLayout>& units) {
  if (cfg.tie_word_embeddings) return Linear(units[size_t(embedding_unit())], {"tok_embeddings"});
  return Linear(units[size_t(head_unit(cfg))], {"lm_head"});
}

}  // namespace

OutputHead::OutputHead(const LlamaConfig& cfg, const std::vector<UnitLayout>& units, const SequenceParallel* sp)
    : sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      vocab_size_(cfg.vocab_size),
      eps_(cfg.norm_eps),
      norm_(units[size_t(head_unit(cfg))], "norm"),
      head_unit_(head_unit(cfg)),
      weight_unit_(cfg.tie_word_embeddings ? embedding_unit() : head_unit(cfg)),
      lm_head_(lm_head_of(cfg, units)) {}

void OutputHead::before_forward(ParamProvider& p) const {
  p.before_forward(head_unit_);
  if (weight_unit_ != head_unit_) p.before_forward(weight_unit_);
}

void OutputHead::after_forward(ParamProvider& p) const {
  if (weight_unit_ != head_unit_) p.after_forward(weight_unit_);
  p.after_forward(head_unit_);
}

void OutputHead::before_backward(ParamProvider& p) const {
  if (weight_unit_ != head_unit_) p.before_backward(weight_unit_);
  p.before_backward(head_unit_);
}

void OutputHead::after_backward(ParamProvider& p) const {
  p.after_backward(head_unit_);
  if (weight_unit_ != head_unit_) p.after_backward(weight_unit_);
}

void OutputHead::forward(const Tensor& x, const UnitParams& head, const UnitParams& weight, const Tensor& hf,
                         const Tensor& rstd, const Tensor& logits) const {
  rmsnorm_forward(x, norm_.value(head), hf, rstd, eps_);
  lm_head_.forward(sp_->gather(hf), weight, logits);  // column-parallel over the vocabulary
}

void OutputHead::backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd,
                          const UnitParams& head, const UnitParams& weight, const Tensor& dh, const Tensor& dx) const {
  const Tensor dh_all = sp_->partial_for(dh);
  lm_head_.backward(dlogits, sp_->gather(hf), weight, dh_all);  // hf gathered again: Note [Sequence parallelism]
  sp_->gather_backward(dh_all, dh);
  rmsnorm_backward(dh, x, norm_.value(head), rstd, dx, norm_.grad(head), /*accumulate_dx=*/false);
}

void OutputHead::loss(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
                      double grad_scale) const {
  if (sp_->on()) {
    vocab_parallel_cross_entropy(logits, targets, losses, dlogits, grad_scale, vocab_size_, sp_->group(),
                                 sp_->stats());
  } else if (dlogits.defined()) {
    cross_entropy_forward_backward(logits, targets, losses, dlogits, grad_scale);
  } else {
    cross_entropy_forward(logits, targets, losses);
  }
}

}  // namespace fsdp::model
