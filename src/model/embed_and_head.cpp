// The decoder's embedding and output head over the op set; see embed_and_head.h.
#include "fsdp/model/embed_and_head.h"

#include "fsdp/ops/embedding.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::model {

void TokenEmbedding::forward(const Tensor& ids, const UnitParams& p, const Tensor& out) const {
  embedding_forward(ids, table_.value(p), out);
}

void TokenEmbedding::backward(const Tensor& ids, const Tensor& dout, const UnitParams& p) const {
  if (table_.frozen()) return;
  embedding_backward(ids, dout, table_.grad(p));
}

namespace {

// Wlm: lm_head in the head unit, or the embedding table itself when tied.
Linear lm_head_of(const LlamaConfig& cfg, const std::vector<UnitLayout>& units) {
  if (cfg.tie_word_embeddings) return Linear(units[size_t(embedding_unit())], {"tok_embeddings"});
  return Linear(units[size_t(head_unit(cfg))], {"lm_head"});
}

}  // namespace

OutputHead::OutputHead(const LlamaConfig& cfg, const std::vector<UnitLayout>& units)
    : eps_(cfg.norm_eps),
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
  lm_head_.forward(hf, weight, logits);
}

void OutputHead::backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd,
                          const UnitParams& head, const UnitParams& weight, const Tensor& dh, const Tensor& dx) const {
  lm_head_.backward(dlogits, hf, weight, dh);
  rmsnorm_backward(dh, x, norm_.value(head), rstd, dx, norm_.grad(head), /*accumulate_dx=*/false);
}

}  // namespace fsdp::model
