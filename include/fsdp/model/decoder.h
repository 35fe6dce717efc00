// The decoder (Llama 2): embedding -> block x L -> final norm -> head -> cross-entropy,
// forward and backward side by side, no autograd.
//
//   x0 = embed(ids)
//   per block:  x2 = x + attention(rmsnorm(x))   ;  x' = x2 + mlp(rmsnorm(x2))
//               (transformer_block.h; the MLP is dense SwiGLU or a sparse MoE)
//   head:       logits = rmsnorm(xL) @ Wlm^T ; loss = cross_entropy(logits, targets)
//   MoE:        loss += aux_coef * aux + z_coef * z over all layers' routers (router_loss.h)
//
// Activations for one micro-batch of B sequences of T tokens (N = B*T rows) live in
// LlamaActivations (activations.h: also activation checkpointing and offloading),
// allocated once and reused every micro-batch, so a step allocates nothing after the first. Parameters are never owned here: the model asks a
// ParamProvider (param_provider.h) for each unit's flat buffer right before it runs that
// unit and tells it when it is done, which is exactly where FSDP gathers, frees and
// reduce-scatters (see param_units.h for the layout of a flat buffer).
#pragma once

#include <memory>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/activations.h"
#include "fsdp/model/embed_and_head.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/lora_adapter.h"
#include "fsdp/model/moe_dispatch.h"
#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/peft.h"
#include "fsdp/model/router_loss.h"
#include "fsdp/model/sequence_parallel.h"
#include "fsdp/model/tensor_parallel.h"
#include "fsdp/model/transformer_block.h"

namespace fsdp::model {

struct LossSum {
  double sum = 0;       // sum of per-token losses over non-ignored targets
  int64_t tokens = 0;   // number of non-ignored targets
  // A mixture of experts' router losses (router_loss.h), unweighted, summed over the
  // micro-batches this sum covers (each micro-batch pools its own layers); 0 for Llama.
  double router_aux = 0, router_z = 0;
  int64_t micro_batches = 0;
};

// Sum of per-token losses (host tensors) over the targets that are not ignored, in double,
// in row order: the same bits on every backend given the same losses.
LossSum sum_losses(const Tensor& losses, const Tensor& targets);

class Llama {
 public:
  // With peft.lora.enabled the units are lora_units' (a frozen base, trainable adapters;
  // dense frozen weights in `dtype`); `dropout_seed` keys the adapters' dropout masks.
  // With cfg.tensor_parallel T > 1 the model is its tensor rank's share (units: the rank's
  // slices; activations: its rows and heads, model/tensor_parallel.h) and `tensor` its
  // group of T ranks, which must outlive the model; every rank of the group runs the same
  // passes on the same micro-batch, and gets the same losses.
  // With cfg.expert_parallel E > 1 (a mixture of experts) the model holds its expert rank's
  // experts (units: each block's experts in an expert unit of its own, param_units.h) and
  // `expert` is its group of E ranks (outliving the model), each running its own
  // micro-batch: the layers trade (token, choice) pairs over it (moe_dispatch.h).
  explicit Llama(const LlamaConfig& cfg, DType dtype = DType::F32, Device device = Device::cpu(),
                 const PeftSpec& peft = {}, uint64_t dropout_seed = 0, TensorGroup* tensor = nullptr,
                 ExpertGroup* expert = nullptr);

  const LlamaConfig& config() const { return cfg_; }
  const PeftSpec& peft() const { return peft_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  // Forward and backward of one micro-batch already placed in act.ids / act.targets.
  // Gradients (scaled by grad_scale, e.g. 1 / tokens in the global batch) are added to
  // the provider's grad buffers. Returns the unscaled loss sum and token count.
  // A mixture of experts adds its router losses, pooled over this micro-batch's layers, to
  // the objective with weight router_scale (e.g. 1 / (micro-batches x ranks): the mean
  // over micro-batches, as each forward of transformers computes its own aux loss).
  LossSum forward_backward(LlamaActivations& act, ParamProvider& params, double grad_scale,
                           double router_scale = 1.0);
  // The same without the read-back: on a device the call only enqueues work, and
  // act.losses holds the per-token losses once the stream gets there (sum them on the host
  // with sum_losses). Lets a trainer read a whole step's losses with one wait. (A mixture
  // of experts waits once per layer anyway, for its group sizes.)
  void enqueue_forward_backward(LlamaActivations& act, ParamProvider& params, double grad_scale,
                                double router_scale = 1.0);
  // The router losses of the last forward over `act` (zeros for Llama); reads back.
  RouterLosses router_losses(const LlamaActivations& act) const;
  // Each layer's routing statistics of the last forward over `act` (null for a dense MLP);
  // their counts are on the host already.
  std::vector<const RouterRecord*> router_records(const LlamaActivations& act) const;
  // Forward only; leaves the logits in act.logits and the per-token losses in act.losses.
  LossSum forward(LlamaActivations& act, ParamProvider& params);
  // A mixture of experts' routing biases (router_bias.h; off until enabled or set), which
  // every forward routes with; null for a dense model.
  RouterBias* router_bias() { return router_bias_.get(); }
  const RouterBias* router_bias() const { return router_bias_.get(); }

 private:
  // for_backward: an offloading run stashes each checkpointed block's kept tensors.
  void trunk_forward(LlamaActivations& act, ParamProvider& params, bool for_backward);
  void blocks_backward(LlamaActivations& act, ParamProvider& params);
  void head_backward(LlamaActivations& act, ParamProvider& params, double grad_scale);
  LossSum loss_sum(const LlamaActivations& act) const;
  // The LoRA / NF4 scratch for `act` (sized on first use), set up for a training pass or
  // an evaluation; null when the model has neither.
  LinearScratch* scratch_for(const LlamaActivations& act, bool training);

  // The pass's tensor- and expert-parallel scratch into sp_ and ep_ (nothing without them).
  void use_scratch(LlamaActivations& act);
  // Block l's buffers, with its expert unit's under expert parallelism.
  UnitParams block_view(ParamProvider& p, int layer, LinearScratch* scratch, bool backward) const;

  LlamaConfig cfg_;
  DType dtype_;
  Device device_;
  // Heap-held: the sublayers keep its address (a moved Llama keeps it valid).
  std::unique_ptr<SequenceParallel> sp_;
  std::unique_ptr<ExpertDispatch> ep_;
  PeftSpec peft_;
  uint64_t dropout_key_ = 0;
  std::vector<UnitLayout> units_;
  LinearScratch scratch_;
  bool needs_scratch_ = false;
  TokenEmbedding embedding_;
  std::shared_ptr<RouterBias> router_bias_;  // shared with every block's MoE MLP
  std::vector<TransformerBlock> blocks_;
  OutputHead head_;
};

}  // namespace fsdp::model
