// Note [Saved tensors]
// Every struct a sublayer's forward saves into (AttentionSaved, DenseMlpSaved, MoeMlpSaved,
// the block's x2) names its tensors once, in its bind(): each member with its shape, dtype
// and what recomputing it would cost (its SavedKind). Three readers walk that one list:
//   * allocation: bind with allocate_on(device) gives every member its own buffer;
//   * activation checkpointing (decoder.h): a checkpointed block's member is allocated, lent
//     by the buffers every checkpointed block shares, or placed in an offload slot,
//     according to its kind and the mode (ActivationCheckpointing::placement);
//   * the memory plan (activation_memory.h): bind with a binder that only adds up bytes,
//     in double, so that absurd shapes neither allocate nor overflow.
// So the plan's activation bytes are, by construction, what the trainer allocates.
#pragma once

#include <functional>

#include "fsdp/core/tensor.h"

namespace fsdp::model {

// What producing a saved tensor again would cost, which is what a checkpointing mode
// chooses by.
enum class SavedKind {
  // A row-wise pass over kept tensors: RMSNorm outputs and their 1/rms, SwiGLU's act, an
  // MoE layer's rows gathered into expert order. selective recomputes these.
  Cheap,
  // A GEMM or attention output (with its log-sum-exp), or an MoE routing decision (its
  // recompute would need the top-k, the sort and a host read-back of the group sizes).
  // selective keeps these; full recomputes them with the rest of the block.
  Expensive,
  // A few numbers per block read after the whole forward (an MoE layer's router
  // statistics, pooled over layers for the router losses): always the block's own.
  Statistic,
};

struct SavedSpec {
  const char* name;  // the member's name, for messages
  Dims sizes;
  DType dtype;
  SavedKind kind;
};

// Gives one member its storage (allocates it, lends it a shared buffer's, or leaves it
// undefined). Called once per member, in the struct's member order.
using SavedBinder = std::function<void(Tensor& member, const SavedSpec& spec)>;

// Every member gets a buffer of its own on `device`.
SavedBinder allocate_on(Device device);
// The spec's bytes, in double (exact below 2^53 bytes; no overflow for any shape).
double spec_bytes(const SavedSpec& spec);

}  // namespace fsdp::model
