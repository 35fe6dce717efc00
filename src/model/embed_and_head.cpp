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

OutputHead::OutputHead(const LlamaConfig& cfg, const UnitLayout& head)
    : eps_(cfg.norm_eps), norm_(head, "norm"), lm_head_(head, {"lm_head"}) {}

void OutputHead::forward(const Tensor& x, const UnitParams& p, const Tensor& hf, const Tensor& rstd,
                         const Tensor& logits) const {
  rmsnorm_forward(x, norm_.value(p), hf, rstd, eps_);
  lm_head_.forward(hf, p, logits);
}

void OutputHead::backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd,
                          const UnitParams& p, const Tensor& dh, const Tensor& dx) const {
  lm_head_.backward(dlogits, hf, p, dh);
  rmsnorm_backward(dh, x, norm_.value(p), rstd, dx, norm_.grad(p), /*accumulate_dx=*/false);
}

}  // namespace fsdp::model
