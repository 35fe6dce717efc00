// The decoder's two ends, around the blocks:
//
//   TokenEmbedding   x0 = table[ids]                        (unit "embedding")
//   OutputHead       logits = Linear_lm(rmsnorm(xL))         (unit "head": final norm + lm_head)
//
// With tied embeddings Linear_lm's weight is the embedding table (logits = h table^T), read
// from the embedding unit's buffer, and its gradient goes into that unit's gradient buffer,
// where the embedding's own backward adds to it: the head's weight_unit() says which unit
// holds the weight, and the caller passes that unit's parameters and gradients.
//
// Both are shared by training (decoder.h) and generation with a KV cache (llama_decode.h).
// The head's backward takes dL/dlogits (cross_entropy_forward_backward writes it into the
// logits buffer itself) and produces dL/dxL.
//
// Under tensor parallelism (a SequenceParallel that is on) both split the vocabulary
// (model/vocab_parallel.h): the table and Wlm are this rank's rows, the embedding's output
// and the head's input this rank's rows of the residual stream, the logits [N, V / T] this
// rank's vocabulary over all N rows, and loss() the vocabulary-parallel cross-entropy.
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/linear.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/sequence_parallel.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

class TokenEmbedding {
 public:
  // Resolves the table in the embedding unit's layout (trainable, or frozen under LoRA).
  explicit TokenEmbedding(const UnitLayout& embedding, const SequenceParallel* sp = nullptr);
  // out[n] = table[ids[n]]; ids [N] int32, out [N, C].
  void forward(const Tensor& ids, const UnitParams& p, const Tensor& out) const;
  // table gradient += scatter of dout by ids (nothing when the table is frozen).
  void backward(const Tensor& ids, const Tensor& dout, const UnitParams& p) const;
  bool frozen() const { return table_.frozen(); }

 private:
  ParamRef table_;
  const SequenceParallel* sp_;
  int64_t vocab_size_ = 0;  // the whole vocabulary's
};

class OutputHead {
 public:
  // Resolves the norm in the head unit's layout and lm_head in it, or (tied) the table in
  // the embedding unit's; `units` are the model's units (llama_units or lora_units).
  OutputHead(const LlamaConfig& cfg, const std::vector<UnitLayout>& units, const SequenceParallel* sp = nullptr);
  // The unit holding Wlm: head_unit(cfg), or embedding_unit() when tied.
  int weight_unit() const { return weight_unit_; }
  // The provider's hooks around the head: the head unit, then (tied) the weight's unit,
  // handed back in the reverse order; backward mirrors forward (the weight's unit first).
  // See Note [Units used twice] in fsdp_engine.cpp for what the second use costs in FSDP.
  void before_forward(ParamProvider& p) const;
  void after_forward(ParamProvider& p) const;
  void before_backward(ParamProvider& p) const;
  void after_backward(ParamProvider& p) const;
  // hf = rmsnorm(x) (rstd saved), logits = hf @ Wlm^T. x: [rows, C] (rows may be strided);
  // `head` the head unit's buffers, `weight` weight_unit()'s (the same untied).
  void forward(const Tensor& x, const UnitParams& head, const UnitParams& weight, const Tensor& hf,
               const Tensor& rstd, const Tensor& logits) const;
  // From dlogits (in the logits buffer): the norm's gradient added into head.grads, Wlm's
  // into weight.grads (when they train), dx = dL/dx overwritten; dh is [rows, C] scratch.
  void backward(const Tensor& dlogits, const Tensor& x, const Tensor& hf, const Tensor& rstd, const UnitParams& head,
                const UnitParams& weight, const Tensor& dh, const Tensor& dx) const;
  // Per-token losses from the logits and, when dlogits is defined (it may be the logits),
  // their gradient scaled by grad_scale: the fused cross-entropy, vocabulary-parallel under
  // tensor parallelism (the same losses on every rank of the group).
  void loss(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
            double grad_scale) const;

 private:
  const SequenceParallel* sp_;
  int64_t vocab_size_ = 0;
  double eps_ = 0;
  ParamRef norm_;  // the final norm
  int head_unit_ = 0, weight_unit_ = 0;
  Linear lm_head_;
};

}  // namespace fsdp::model
