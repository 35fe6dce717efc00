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

namespace fsdp::model {

class TokenEmbedding {
 public:
  explicit TokenEmbedding(const LlamaConfig& cfg) : vocab_(cfg.vocab_size), hidden_(cfg.hidden_size) {}
  // The [V, C] table inside the embedding unit's flat buffer (parameters or gradients).
  Tensor table(const Tensor& flat) const;
  // out[n] = table[ids[n]]; ids [N] int32, out [N, C].
  void forward(const Tensor& ids, const Tensor& params, const Tensor& out) const;
  // table gradient += scatter of dout by ids.
  void backward(const Tensor& ids, const Tensor& dout, const Tensor& grads) const;

 private:
  int64_t vocab_ = 0, hidden_ = 0;
};

class OutputHead {
 public:
  // Resolves norm and lm_head in the head unit's layout.
  OutputHead(const LlamaConfig& cfg, const UnitLayout& head);
  // hf = rmsnorm(x) (rstd saved), logits = hf @ Wlm^T. x: [rows, C] (rows may be strided).
  void forward(const Tensor& x, const Tensor& params, const Tensor& hf, const Tensor& rstd,
               const Tensor& logits) const;
  // From dlogits (in the logits buffer): Wlm and norm gradients added into `grads`,
  // dx = dL/dx overwritten; dh is [rows, C] scratch.
  void backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd, const Tensor& params,
                const Tensor& grads, const Tensor& dh, const Tensor& dx) const;

 private:
  int64_t hidden_ = 0;
  double eps_ = 0;
  int64_t norm_ = 0;  // offset of the final norm in the head unit
  Linear lm_head_;
};

}  // namespace fsdp::model
