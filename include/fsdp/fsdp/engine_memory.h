// What the FSDP engine (fsdp_engine.h) holds on one rank, from the units' shapes alone,
// without building it: the memory plan's engine side. Sizes are doubles (bytes, exact
// below 2^53), so absurd shapes neither allocate nor overflow.
//
// The sharded state is arithmetic (each unit padded to a multiple of the shard group,
// fp32 master, gradient and two AdamW moments per shard element, the param_dtype and
// reduce_dtype copies). The gathered buffers are the engine's pool, which never shrinks:
// as many buffers of each dtype as were ever in use at once, each the size of the largest
// padded unit. That count comes from replaying the engine's hook sequence for one step
// (Note [FSDP unit lifecycle] in fsdp_engine.cpp: prefetch, frees after forward, one
// reduce-scatter in flight, no_sync's kept gradients) on a few layers and extending it
// linearly to the model's count, which is exact because beyond prefetch_limit + a few layers
// every count grows by a fixed number per layer. tests/mpi holds it to the engine's
// buffer_bytes() for each strategy, dtype mix, prefetch and accumulation.
//
// A unit's frozen bytes (a LoRA base, dense or NF4: frozen_shards.h) add a uint8 shard and
// uint8 pool buffers (the largest padded frozen unit each), gathered and released with the
// unit, with no gradient, moments or reduction; a unit with nothing trainable (numel 0)
// has no trainable shard or buffer, and a frozen embedding's backward gather is skipped
// (ParamProvider::skip_backward), as the model does.
//
// Expert parallelism (model/expert_parallel.h): a unit of one block's experts
// (UnitLayout::experts_of) is sharded over its own group, the ranks holding the same
// experts (fsdp_engine.h), padded to that group and direct (no pool buffer) when the group
// is one rank in float32; the engine uses it right after its block, both gathered at once
// (decoder.cpp's trunk_forward), and the pool's buffers are each the largest padded unit
// over both kinds.
#pragma once

#include <vector>

#include "fsdp/fsdp/fsdp_engine.h"

namespace fsdp {

struct UnitShape {
  double numel = 0;         // trainable elements of one unit
  double count = 1;         // consecutive units of this shape (a model's blocks)
  double frozen_bytes = 0;  // its frozen bytes (LoRA's base; param_units.h)
  // Expert units: the shapes marked so hold one unit per block, the blocks' in order, and
  // come after the head in the list as in the model's (param_units.h).
  bool experts = false;
  int group = 0;  // the ranks it is sharded over; 0: the shard group
};

struct EngineMemory {
  double master = 0;        // fp32 parameter shards
  double grads = 0;         // fp32 gradient shards
  double moments = 0;       // AdamW exp_avg and exp_avg_sq (fp32)
  double shard_casts = 0;   // master cast to param_dtype, reduce_dtype receive shards
  double buffer_bytes = 0;  // one compute-dtype gathered buffer (the largest padded unit)
  double compute_buffers = 0;  // compute-dtype buffers: parameters and unsharded gradients in flight
  double kept_gradients = 0;   // of those, the unsharded gradients no_sync keeps between micro-batches
  double staging = 0;          // param_dtype / reduce_dtype buffers (all-gather in, reduce-scatter out)
  double scalars = 8;          // the gradient norm's float64
  double frozen = 0;               // frozen shards (uint8)
  double frozen_buffer_bytes = 0;  // one gathered frozen buffer (the largest padded frozen unit)
  double frozen_buffers = 0;       // frozen buffers in use at once

  double sharded() const { return master + grads + moments + shard_casts + frozen; }
  double gathered() const { return compute_buffers * buffer_bytes + frozen_buffers * frozen_buffer_bytes; }
  double total() const { return sharded() + gathered() + staging + scalars; }
};

// `shard_size` ranks share each unit (the shard group); accum_steps micro-batches per step.
EngineMemory engine_memory(const std::vector<UnitShape>& units, int shard_size, const FsdpOptions& options,
                           int accum_steps);

}  // namespace fsdp
