// The Llama 2 decoder: forward and backward side by side, no autograd.
//
//   x0 = embed(ids)
//   per block:  h1 = rmsnorm(x) ; q|k|v = h1 @ Wqkv^T ; rope(q, k) ; a = attn(q, k, v)
//               x2 = x + a @ Wo^T ; h2 = rmsnorm(x2) ; g|u = h2 @ Wgu^T
//               x' = x2 + swiglu(g, u) @ Wdown^T
//   head:       logits = rmsnorm(xL) @ Wlm^T ; loss = cross_entropy(logits, targets)
//
// Activations for one micro-batch of B sequences of T tokens (N = B*T rows) live in
// LlamaActivations, allocated once and reused every micro-batch, so a step allocates
// nothing after the first. Parameters are never owned here: the model asks a
// ParamProvider for each unit's flat buffer right before it runs that unit and tells it
// when it is done, which is exactly where FSDP gathers, frees and reduce-scatters
// (see param_units.h for the layout of a flat buffer).
#pragma once

#include <memory>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/ops/rope.h"

namespace fsdp::model {

// Supplies the flat parameter (and gradient) buffers of each unit, on the model's device
// in its compute dtype. The single-process trainer hands out buffers it owns; the FSDP
// engine gathers shards before and releases / reduce-scatters after.
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  virtual Tensor params(int unit) = 0;  // [unit numel], valid between before_* and after_*
  virtual Tensor grads(int unit) = 0;   // [unit numel], gradients are accumulated (+=) into it
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
  // End of a forward (or forward + backward) pass: nothing may stay in flight.
  virtual void finish() {}
};

struct BlockActivations {
  Tensor h1, rstd1, qkv, att, lse, x2, h2, rstd2, gu, act;
};

struct LlamaActivations {
  int64_t batch = 0, seq_len = 0;
  Tensor ids, targets;           // [N] int32
  std::vector<Tensor> resid;     // L+1 of [N, C]: input of each block, then the final hidden
  std::vector<BlockActivations> blocks;
  Tensor hf, rstdf, logits, losses;  // final norm output, its rstd, [N, V], [N]
  // Gradient scratch shared by all blocks (backward runs one block at a time).
  Tensor dres, dh, dqkv, datt, dgu, dact;

  LlamaActivations(const LlamaConfig& cfg, int64_t batch, int64_t seq_len, DType dtype, Device device);
};

struct LossSum {
  double sum = 0;       // sum of per-token losses over non-ignored targets
  int64_t tokens = 0;   // number of non-ignored targets
};

// Sum of per-token losses (host tensors) over the targets that are not ignored, in double,
// in row order: the same bits on every backend given the same losses.
LossSum sum_losses(const Tensor& losses, const Tensor& targets);

class Llama {
 public:
  explicit Llama(const LlamaConfig& cfg, DType dtype = DType::F32, Device device = Device::cpu());

  const LlamaConfig& config() const { return cfg_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  // Forward and backward of one micro-batch already placed in act.ids / act.targets.
  // Gradients (scaled by grad_scale, e.g. 1 / tokens in the global batch) are added to
  // the provider's grad buffers. Returns the unscaled loss sum and token count.
  LossSum forward_backward(LlamaActivations& act, ParamProvider& params, double grad_scale);
  // The same without the read-back: on a device the call only enqueues work, and
  // act.losses holds the per-token losses once the stream gets there (sum them on the host
  // with sum_losses). Lets a trainer read a whole step's losses with one wait.
  void enqueue_forward_backward(LlamaActivations& act, ParamProvider& params, double grad_scale);
  // Forward only; leaves the logits in act.logits and the per-token losses in act.losses.
  LossSum forward(LlamaActivations& act, ParamProvider& params);

  // Element offsets of a block's parameters in its flat buffer, resolved once.
  struct BlockOffsets {
    int64_t wq, wo, w_gate, w_down, attn_norm, mlp_norm;
  };

 private:
  void trunk_forward(LlamaActivations& act, ParamProvider& params);
  Tensor embedding_table(const Tensor& flat) const;
  Tensor head_lm(const Tensor& flat) const;
  Tensor head_norm(const Tensor& flat) const;
  void block_forward(int layer, LlamaActivations& act, const Tensor& flat);
  void block_backward(int layer, LlamaActivations& act, const Tensor& flat, const Tensor& grad);
  void head_forward(LlamaActivations& act, const Tensor& flat);
  LossSum loss_sum(const LlamaActivations& act) const;

  LlamaConfig cfg_;
  DType dtype_;
  Device device_;
  std::vector<UnitLayout> units_;
  RopeTables rope_;
  std::vector<BlockOffsets> blocks_;
  int64_t head_lm_ = 0, head_norm_ = 0;
};

// Seeded initialisation of one unit's parameters, element by element from a counter-based
// generator keyed by (seed, unit, element offset): any slice of the flat buffer can be
// initialised on its own and gets the same values, whatever the sharding.
// `flat` holds the elements [begin, begin + flat.numel()) of the unit. float32, CPU.
void init_unit(const UnitLayout& unit, int unit_index, uint64_t seed, double init_std, const Tensor& flat,
               int64_t begin = 0);

}  // namespace fsdp::model
