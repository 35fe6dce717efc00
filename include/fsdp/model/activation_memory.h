// The bytes LlamaActivations (activations.h) allocates for a micro-batch, computed from the
// same bind() lists it allocates from (Note [Saved tensors]) and the same placement policy,
// in double and without allocating: the memory plan's activation side. Equal, byte for byte,
// to what the constructor allocates (tests/cpu/test_activation_checkpointing.cpp).
#pragma once

#include <cstdint>

#include "fsdp/model/activations.h"

namespace fsdp::model {

struct ActivationMemory {
  double saved = 0;    // what blocks keep for backward: inputs, own tensors, the shared scratch, offload slots
  double head = 0;     // logits [N, V], the final norm's output and 1/rms, per-token losses
  double scratch = 0;  // the backward's scratch (BlockGrads), shared by every block
  double batch = 0;    // token ids, targets and document starts
  double host = 0;     // offloaded copies, in host memory (page-locked on a GPU)

  double device() const { return saved + head + scratch + batch; }
};

ActivationMemory activation_memory(const LlamaConfig& cfg, int64_t batch, int64_t seq_len, DType dtype,
                                   const ActivationCheckpointing& checkpointing);

}  // namespace fsdp::model
