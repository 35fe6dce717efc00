// The decoder's embedding and output head over the op set; see embed_and_head.h.
#include "fsdp/model/embed_and_head.h"

#include "fsdp/ops/embedding.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::model {

Tensor TokenEmbedding::table(const Tensor& flat) const {
  return flat.narrow(0, 0, vocab_ * hidden_).reshape({vocab_, hidden_});
}

void TokenEmbedding::forward(const Tensor& ids, const Tensor& params, const Tensor& out) const {
  embedding_forward(ids, table(params), out);
}

void TokenEmbedding::backward(const Tensor& ids, const Tensor& dout, const Tensor& grads) const {
  embedding_backward(ids, dout, table(grads));
}

namespace {

// Wlm: lm_head in the head unit, or the embedding table itself when tied.
Linear lm_head_of(const LlamaConfig& cfg, const std::vector<UnitLayout>& units) {
  if (cfg.tie_word_embeddings) return Linear(units[size_t(embedding_unit())], {"tok_embeddings"});
  return Linear(units[size_t(head_unit(cfg))], {"lm_head"});
}

}  // namespace

OutputHead::OutputHead(const LlamaConfig& cfg, const std::vector<UnitLayout>& units)
    : hidden_(cfg.hidden_size),
      eps_(cfg.norm_eps),
      norm_(units[size_t(head_unit(cfg))].slot("norm").offset),
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

void OutputHead::forward(const Tensor& x, const Tensor& params, const Tensor& weight_params, const Tensor& hf,
                         const Tensor& rstd, const Tensor& logits) const {
  rmsnorm_forward(x, params.narrow(0, norm_, hidden_), hf, rstd, eps_);
  lm_head_.forward(hf, weight_params, logits);
}

void OutputHead::backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd,
                          const UnitBuffers& head, const UnitBuffers& weight, const Tensor& dh,
                          const Tensor& dx) const {
  lm_head_.backward(dlogits, hf, weight.params, weight.grads, dh);
  rmsnorm_backward(dh, x, head.params.narrow(0, norm_, hidden_), rstd, dx, head.grads.narrow(0, norm_, hidden_),
                   /*accumulate_dx=*/false);
}

}  // namespace fsdp::model
