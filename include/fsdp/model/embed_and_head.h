// The decoder's two ends, around the blocks:
//
//   TokenEmbedding   x0 = table[ids]                        (unit "embedding")
//   OutputHead       logits = Linear_lm(rmsnorm(xL))         (unit "head": final norm + lm_head)
//
// Both are shared by training (decoder.h) and generation with a KV cache (llama_decode.h).
// The head's backward takes dL/dlogits (cross_entropy_forward_backward writes it into the
// logits buffer itself) and produces dL/dxL.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/linear.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

class TokenEmbedding {
 public:
  // Resolves the table in the embedding unit's layout (trainable, or frozen under LoRA).
  explicit TokenEmbedding(const UnitLayout& embedding) : table_(embedding, "tok_embeddings") {}
  // out[n] = table[ids[n]]; ids [N] int32, out [N, C].
  void forward(const Tensor& ids, const UnitParams& p, const Tensor& out) const;
  // table gradient += scatter of dout by ids (nothing when the table is frozen).
  void backward(const Tensor& ids, const Tensor& dout, const UnitParams& p) const;
  bool frozen() const { return table_.frozen(); }

 private:
  ParamRef table_;
};

class OutputHead {
 public:
  // Resolves norm and lm_head in the head unit's layout.
  OutputHead(const LlamaConfig& cfg, const UnitLayout& head);
  // hf = rmsnorm(x) (rstd saved), logits = hf @ Wlm^T. x: [rows, C] (rows may be strided).
  void forward(const Tensor& x, const UnitParams& p, const Tensor& hf, const Tensor& rstd,
               const Tensor& logits) const;
  // From dlogits (in the logits buffer): Wlm and norm gradients added into p.grads (when
  // they train), dx = dL/dx overwritten; dh is [rows, C] scratch.
  void backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd, const UnitParams& p,
                const Tensor& dh, const Tensor& dx) const;

 private:
  double eps_ = 0;
  ParamRef norm_;  // the final norm
  Linear lm_head_;
};

}  // namespace fsdp::model
