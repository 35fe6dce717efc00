// The activations of one micro-batch (LlamaActivations), allocated once and reused every
// micro-batch, and the activation checkpointing policy that decides where each block's
// saved tensors live.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/saved_tensors.h"
#include "fsdp/model/transformer_block.h"
#include "fsdp/model/vocab_parallel.h"

namespace fsdp::model {

class ActivationOffload;

// Activation checkpointing (PyTorch's checkpoint_wrapper, torchtitan's full and op-level
// selective AC, Megatron's selective recompute), as a policy over the saved-tensor structs
// (Note [Saved tensors]): a checkpointed block's saved tensor lives where placement() says
// for its kind. Full: only the block's input (resid[l]) stays; everything else is in one
// scratch the checkpointed blocks share, which the block's forward fills again inside its
// backward. Selective: the Expensive tensors (GEMM and attention outputs, routing) stay too,
// and only the Cheap ones (norms, SwiGLU, gathers) are shared and recomputed. Statistic
// tensors are always the block's own. The forward is deterministic, so the recomputed
// activations, and every loss and gradient, are the same bits as keeping them. Under FSDP
// the recompute runs after the unit is gathered for backward, which it is anyway: no extra
// all-gather. Offloading (activation_offload.h) moves what a checkpointed block keeps (its
// input, and under selective its Expensive tensors) to host memory during the forward and
// brings it back `offload_horizon` checkpointed blocks ahead of the backward.
struct ActivationCheckpointing {
  Recompute mode = Recompute::None;
  int every = 1;             // checkpoint blocks l with l % every == 0 (1: every block)
  bool offload = false;      // a checkpointed block's kept tensors wait in host memory
  int offload_horizon = 2;   // checkpointed blocks fetched back ahead of the backward

  bool checkpointed(int64_t layer) const { return mode != Recompute::None && layer % every == 0; }
  // The checkpointed blocks among the first `layers`.
  int64_t count(int64_t layers) const { return mode == Recompute::None ? 0 : (layers + every - 1) / every; }
};

// Where a saved tensor of a checkpointed block lives.
enum class Placement {
  Own,        // a buffer of the block's own, kept from its forward to its backward
  Shared,     // the scratch every checkpointed block shares: recomputed before the backward
  Offloaded,  // a device slot while the block runs, host memory in between
};
Placement placement(const ActivationCheckpointing& ac, SavedKind kind);

struct LlamaActivations {
  int64_t batch = 0, seq_len = 0;
  ActivationCheckpointing checkpointing;
  Tensor ids, targets;           // [N] int32
  // [B, T] int32: each token's document start in its row (Note [Document masking] in
  // fsdp/ops/attention.h), read only when `documents` (packed examples, document masking).
  Tensor doc_start;
  bool documents = false;
  // The global position of this micro-batch's first sequence in the run's sample order
  // (train/trainer.h): LoRA's dropout numbers row (b, t) as (first_sample + b) * T + t,
  // so every rank count draws the same masks for the same samples.
  int64_t first_sample = 0;
  // L+1 of [N, C]: input of each block, then the final hidden. An offloaded block's input
  // is a view of its device slot. Under tensor parallelism every [N, C] tensor of the
  // residual stream (these, the blocks' norm outputs, hf, the gradients dres and dh) holds
  // this rank's N / T rows (Note [Sequence parallelism]).
  std::vector<Tensor> resid;
  std::vector<BlockActivations> blocks;  // bound by placement(): own, shared or a slot's
  BlockActivations shared;               // the checkpointed blocks' recomputed tensors
  // Where a fully checkpointed block's recompute writes its output again: resid[l+1]
  // itself, unless offloading (then that slot may hold another block's input by then).
  Tensor recompute_out;
  std::unique_ptr<ActivationOffload> offload;  // when checkpointing.offload
  Tensor hf, rstdf, logits, losses;  // final norm output, its rstd, [N, V] (V / T), [N]
  BlockGrads grads;                  // backward scratch shared by the head and every block
  // Tensor parallelism only: the sequence-parallel mappings' [N, C] buffers and the
  // vocabulary-parallel cross-entropy's statistics, shared by every block and the head.
  Tensor tp_gathered, tp_partial;
  VocabParallelStats tp_stats;
  // Expert parallelism only: the dispatch's two [R, C] buffers (R = max_received_rows;
  // moe_dispatch.h), shared by every MoE layer.
  Tensor ep_staging, ep_grouped;

  LlamaActivations(const LlamaConfig& cfg, int64_t batch, int64_t seq_len, DType dtype, Device device,
                   ActivationCheckpointing checkpointing = {});
  ~LlamaActivations();
  LlamaActivations(LlamaActivations&&) noexcept;

  // The tensor a checkpointed block `layer`'s full recompute writes its output into.
  const Tensor& recompute_output(int64_t layer) const;
};

}  // namespace fsdp::model
