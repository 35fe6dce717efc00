// The MLP sublayer of a transformer block, as an interface:
//
//   out = x + mlp(rmsnorm(x))
//
// with two implementations: the dense SwiGLU of Llama (mlp_dense.h) and the sparse
// mixture of experts of Mixtral (mlp_moe.h), chosen by make_mlp from the model config. Each implementation names what its forward saves for
// backward in its own MlpSaved, and what its backward needs as scratch in its own MlpGrads;
// the block allocates them through the implementation, once, and hands them back on every
// call, so no call allocates. forward reads only x and the parameters and writes only
// `saved` and `out`, so it can run again inside backward (activation checkpointing).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/model/saved_tensors.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

// What a routed MLP's forward leaves for the router losses, which pool every layer
// (transformers' load_balancing_loss_func concatenates all layers' router logits).
struct RouterRecord {
  Tensor prob_sum;             // [E] stat dtype, on the device: sum over tokens of softmax(router logits)
  Tensor lse_sq_sum;           // [1] stat dtype, on the device: sum over tokens of logsumexp(logits)^2
  std::vector<int64_t> count;  // [E] on the host: the (token, choice) pairs routed to each expert
  int64_t tokens = 0;
  int64_t dropped = 0;  // pairs over their expert's capacity, not computed (moe_capacity.h)
};

// The gradient of the pooled router losses w.r.t. one layer's softmax probabilities and
// per-token logsumexp^2: the same for every layer of a micro-batch (router_loss.h).
struct RouterLossGrad {
  Tensor aux_grad;    // [E] stat dtype, on the device; undefined = no load-balancing loss
  double z_scale = 0;  // d loss / d logsumexp(logits_t)^2, per token
};

// What an MLP's forward saves for its backward (one per block); each implementation
// derives its own.
struct MlpSaved {
  virtual ~MlpSaved() = default;
  // Each member to `bind`, in member order, for `rows` token rows (Note [Saved tensors]).
  virtual void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) = 0;
  // The routing statistics of the last forward, or null for an MLP without a router.
  virtual const RouterRecord* router() const { return nullptr; }
};

// An MLP's backward scratch, shared by every block (backward runs one block at a time).
struct MlpGrads {
  virtual ~MlpGrads() = default;
  // Each buffer to `bind` (their kinds mean nothing here: scratch is never kept).
  virtual void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) = 0;
  RouterLossGrad router_loss;  // set by the decoder before the backward; read by a routed MLP
};

// The empty structs of the MLP cfg asks for (dense or MoE), for bind() to fill.
std::unique_ptr<MlpSaved> new_mlp_saved(const LlamaConfig& cfg);
std::unique_ptr<MlpGrads> new_mlp_grads(const LlamaConfig& cfg);

class MlpSublayer {
 public:
  virtual ~MlpSublayer() = default;

  explicit MlpSublayer(const LlamaConfig& cfg) : cfg_(cfg) {}

  // Buffers for `rows` token rows in the compute dtype on the device.
  std::unique_ptr<MlpSaved> make_saved(int64_t rows, DType dtype, Device device) const;
  std::unique_ptr<MlpGrads> make_grads(int64_t rows, DType dtype, Device device) const;

  // out = x + mlp(rmsnorm(x)) over the rows of x ([rows, C]). out may be x itself (the
  // inference path updates the residual stream in place); `saved` may hold more rows than
  // x (an inference decoder's scratch, sized for its longest chunk).
  virtual void forward(const Tensor& x, const UnitParams& p, MlpSaved& saved, const Tensor& out) const = 0;
  // Selective checkpointing: the Cheap members of `saved` again from x and the Expensive
  // members kept from the forward, the same bits as the forward wrote.
  virtual void recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const = 0;
  // On entry dres = dL/d(out); on exit dres = dL/dx. Parameter gradients are added into
  // p.grads (the unit's flat gradient buffer). dh is [rows, C] scratch.
  virtual void backward(const Tensor& x, const MlpSaved& saved, const UnitParams& p, const Tensor& dres,
                        const Tensor& dh, MlpGrads& g) const = 0;

 protected:
  LlamaConfig cfg_;
};

class SequenceParallel;  // sequence_parallel.h
class ExpertDispatch;    // moe_dispatch.h

// The MLP the config asks for, its slots resolved in the block's unit layout; `sp` joins a
// tensor-parallel MLP to the residual stream's rows (null: no tensor parallelism); a mixture
// of experts routes with `bias` (its layer's row of the model's RouterBias; none for a dense
// MLP) and, under expert parallelism, moves its pairs with `ep`, its experts being in
// `experts` (the block's expert unit).
std::unique_ptr<MlpSublayer> make_mlp(const LlamaConfig& cfg, const UnitLayout& block,
                                      const SequenceParallel* sp = nullptr, RouterBiasRef bias = {},
                                      const ExpertDispatch* ep = nullptr, const UnitLayout* experts = nullptr);

}  // namespace fsdp::model
