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

OutputHead::OutputHead(const LlamaConfig& cfg, const UnitLayout& head)
    : hidden_(cfg.hidden_size), eps_(cfg.norm_eps), norm_(head.slot("norm").offset), lm_head_(head, {"lm_head"}) {}

void OutputHead::forward(const Tensor& x, const Tensor& params, const Tensor& hf, const Tensor& rstd,
                         const Tensor& logits) const {
  rmsnorm_forward(x, params.narrow(0, norm_, hidden_), hf, rstd, eps_);
  lm_head_.forward(hf, params, logits);
}

void OutputHead::backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd,
                          const Tensor& params, const Tensor& grads, const Tensor& dh, const Tensor& dx) const {
  lm_head_.backward(dlogits, hf, params, grads, dh);
  rmsnorm_backward(dh, x, params.narrow(0, norm_, hidden_), rstd, dx, grads.narrow(0, norm_, hidden_),
                   /*accumulate_dx=*/false);
}

}  // namespace fsdp::model
