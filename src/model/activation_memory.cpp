// LlamaActivations' bytes without allocating them; see activation_memory.h. Follows the
// constructor in activations.cpp buffer by buffer.
#include "fsdp/model/activation_memory.h"

#include "fsdp/model/activation_offload.h"
#include "fsdp/model/expert_parallel.h"

namespace fsdp::model {
namespace {

// Bytes of one block's saved tensors by where a checkpointed block keeps them.
struct BlockBytes {
  double all = 0, own = 0, shared = 0, offloaded = 0;
};

BlockBytes block_bytes(const LlamaConfig& c, int64_t B, int64_t T, DType dt, const ActivationCheckpointing& ac) {
  BlockBytes b;
  BlockActivations block;
  block.bind(c, B, T, dt, [&](Tensor&, const SavedSpec& s) {
    const double n = spec_bytes(s);
    b.all += n;
    switch (placement(ac, s.kind)) {
      case Placement::Own: b.own += n; break;
      case Placement::Shared: b.shared += n; break;
      case Placement::Offloaded: b.offloaded += n; break;
    }
  });
  return b;
}

}  // namespace

ActivationMemory activation_memory(const LlamaConfig& c, int64_t B, int64_t T, DType dt,
                                   const ActivationCheckpointing& ac) {
  const double N = double(B) * double(T), C = double(c.hidden_size), L = double(c.num_layers);
  const double tp = double(c.tensor_parallel), rows = N / tp;  // this tensor rank's rows of the residual stream
  const double d = double(dtype_size(dt)), st = double(dtype_size(stat_dtype(dt)));
  const double ckpt = double(ac.count(c.num_layers));
  const bool offloading = ac.offload && ckpt > 0;
  const BlockBytes block = block_bytes(c, B, T, dt, ac);
  const double input = rows * C * d;  // one block input

  ActivationMemory m;
  m.batch = 3 * N * 4;  // ids, targets and doc_start, int32
  m.saved = (L + 1 - (offloading ? ckpt : 0)) * input + (L - ckpt) * block.all + ckpt * block.own;
  if (ckpt > 0) m.saved += block.shared;
  if (offloading) {
    const double slots = double(ActivationOffload::num_slots(ac.offload_horizon, ac.count(c.num_layers)));
    m.saved += slots * (input + block.offloaded) + input;  // the slots and the recompute output
    m.host = ckpt * (input + block.offloaded);
  }
  m.head = rows * C * d + rows * st + N * double(c.local_vocab()) * d + N * st;
  BlockGrads grads;
  grads.bind(c, B * T, dt, [&](Tensor&, const SavedSpec& s) { m.scratch += spec_bytes(s); });
  if (c.tensor_parallel > 1) m.scratch += 2 * N * C * d + (1 + tp) * N * 3 * 8;  // Note [Sequence parallelism]
  if (c.expert_units()) m.scratch += 2 * double(max_received_rows(c, B * T)) * C * d;  // Note [Expert-parallel dispatch]
  return m;
}

}  // namespace fsdp::model
