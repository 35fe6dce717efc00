// Activation offloading (SageMaker model parallel's offload_activations with its
// activation_loading_horizon): what a checkpointed block keeps through the forward (its
// input, and under selective checkpointing its Expensive saved tensors) waits in host
// memory between the block's forward and its backward. On the device only S = max(K+1, 3)
// slots of those tensors exist, reused round-robin by the checkpointed blocks in order
// (K = the horizon):
//
//   forward, block j:  before the unit producing j's input writes it, wait until slot
//                      j % S's previous block is on the host; after j's forward, copy the
//                      slot to j's host buffers on the copy stream
//   backward:          fetch the last K checkpointed blocks before the head's backward;
//                      before block j's backward wait for its fetch and fetch block j - K
//                      into the slot block j - K + S has just released
//
// so each copy overlaps the next blocks' compute (Note [Copy stream ordering] in
// fsdp/core/copy_stream.h says how events order the two streams). S >= K + 1 keeps the K
// fetched blocks and the one computing in distinct slots; S >= 3 lets block j's copy to the
// host overlap block j + 1's forward. On the CPU backend the copies are plain copies into a
// host arena of their own: the same code path and accounting, no overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/core/copy_stream.h"
#include "fsdp/core/tensor.h"

namespace fsdp::model {

class ActivationOffload {
 public:
  // `layers`: the checkpointed layers in increasing order; `slots`: S sets of device
  // tensors (each the same list: a block's input, then its offloaded saved tensors).
  ActivationOffload(std::vector<int64_t> layers, int horizon, Device device, std::vector<std::vector<Tensor>> slots);

  // S for a horizon K and n checkpointed blocks (never more slots than blocks).
  static int64_t num_slots(int horizon, int64_t checkpointed_blocks);
  int64_t num_slots() const { return int64_t(slots_.size()); }
  // The slot of checkpointed layer `layer`.
  int64_t slot_of(int64_t layer) const;
  // Bytes of host memory holding the offloaded tensors.
  double host_bytes() const;

  // Forward: `layer`'s slot is about to be written (by the unit producing its input).
  void before_write(int64_t layer);
  // Forward: `layer`'s forward is enqueued; its slot goes to the host.
  void stash(int64_t layer);
  // Backward: before the first block's backward (the head's); fetches the last K blocks.
  void begin_backward();
  // Backward: before `layer`'s recompute; waits for its tensors, fetches the block K below.
  void fetch(int64_t layer);
  // Backward: `layer`'s backward is enqueued; its slot may be refilled.
  void release(int64_t layer);

 private:
  int64_t ordinal(int64_t layer) const;
  void start_fetch(int64_t ordinal);
  // Events per slot: compute done with the forward / the backward; copy done to / from host.
  int ev_forward(int64_t s) const { return int(4 * s); }
  int ev_backward(int64_t s) const { return int(4 * s + 1); }
  int ev_to_host(int64_t s) const { return int(4 * s + 2); }
  int ev_to_device(int64_t s) const { return int(4 * s + 3); }

  std::vector<int64_t> layers_;
  int horizon_;
  std::vector<std::vector<Tensor>> slots_;
  std::vector<std::vector<Tensor>> host_;  // per checkpointed block, the slot's tensors
  std::vector<bool> to_host_pending_;      // per slot: a stash the next writer must wait for
  std::vector<bool> backward_pending_;     // per slot: a release the next fetch must wait for
  std::unique_ptr<CopyStream> stream_;
};

}  // namespace fsdp::model
