// The bytes one rank sends per step under expert parallelism, by theory: what
// tests/mpi/test_expert_parallel.cpp (the CPU, MPI) and tests/cuda_mpi/test_expert_parallel_cuda.cpp
// (CUDA, NCCL) hold the trainer's byte counters to (Note [Expert-parallel dispatch] in
// model/moe_dispatch.h).
//
// Ring volumes of communicator.h, one micro-batch per rank, mesh R x S x E x T over W
// ranks, d = 4 bytes (float32 parameters, gradients and rows):
//   FSDP over the shard group (S E ranks) for the embedding, the blocks and the head
//     (FsdpVolume's formula, Su the bytes of unit u's shard): FULL_SHARD (SE-1) Su x (2
//     gathers, 1 for the head) + (SE-1) Su reduce-scatter, and so does HYBRID_SHARD (it
//     reshards after forward within its group, as PyTorch's does); with R > 1 the
//     replicate all-reduce 2 (R-1)/R Su;
//   the expert units over their own group of S ranks, the same formula with S, and the
//     same replicate all-reduce;
//   per MoE layer, on the expert group: the counts, (E-1) x n x b (an all-gather of n
//     counts: b = 8 on the CPU, float64 on the host; 4 on a GPU, the int32 counts' bytes:
//     Note [Expert counts on a GPU]), then the pairs this rank routes to other ranks'
//     experts (sent) and those other ranks route to its experts (received), (sent +
//     received) x C x d forward (the dispatch sends `sent` rows, the combine returns
//     `received`) and again backward (the gradient of the combine is a dispatch, and vice
//     versa); full checkpointing runs the forward again: once more the counts and (sent +
//     received) x C x d;
//   the grad norm: 2 (SE-1)/SE 8 over the shard group; the loss and votes 2 (W-1)/W 8
//     kSlots and the expert counts 2 (W-1)/W 8 L n over the world.
// With T > 1 (Note [Experts under expert and tensor parallelism]) every unit is this
// tensor rank's slices (Su is its shard of them), each tensor rank routes its group's N
// tokens (so `sent` and `received` above are counts of all N: every tensor rank sends the
// same rows to its peers of the same tensor index), and test_tensor_parallel.cpp's terms
// add up beside: the whole slots' gradients over the tensor group, 2 (T-1)/T x elements x d
// (norms, router); sequence parallelism, X = (T-1) (N/T) C d per all-gather or
// reduce-scatter: 2X the embedding, 10X per block, 3X the head, and full checkpointing's
// forward again 4X per block; the vocabulary-parallel cross-entropy (T-1) N 24; and the
// grad norm's 2 (T-1)/T 8 over the tensor group.
#pragma once

#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/shard_math.h"
#include "fsdp/fsdp/sharding_strategy.h"
#include "fsdp/train/step_votes.h"
#include "fsdp/train/trainer.h"

namespace fsdp::test {

// `g`: the run's host groups (the expert group's host communicator: the routing's counts
// are all-gathered over it, between steps, where no counter sees them). A collective over
// the expert group.
inline double expert_parallel_step_bytes(const train::Trainer& t, const dist::ProcessGroups& g, bool recompute) {
  const bool reshards = reshards_after_forward(t.config().fsdp.sharding_strategy);
  const auto& units = t.model().units();
  const model::LlamaConfig& m = t.model().config();
  const dist::MeshShape mesh = g.mesh.shape();
  const double S = mesh.shard, E = mesh.expert, R = mesh.replicate, W = mesh.world_size(), SE = S * E;
  const double T = mesh.tensor;
  double total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const bool experts = units[u].experts_of >= 0;
    const double n = experts ? S : SE;
    const double Su = double(shard_range(units[u].numel, int(n), 0).size) * 4;
    // The engine frees a unit after forward (and gathers it again for backward) under
    // FULL_SHARD and HYBRID_SHARD; SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 keep it.
    const int gathers = int(u) == model::head_unit(m) || !reshards ? 1 : 2;
    total += (n - 1) * Su * gathers + (n - 1) * Su + 2 * (R - 1) / R * Su;
    double whole = 0;
    for (const model::ParamSlot& s : units[u].params)
      if (s.tp.replicated()) whole += double(s.numel);
    total += 2 * (T - 1) / T * whole * 4;
  }
  const double N = double(t.config().train.micro_batch_size) * t.config().train.seq_len;
  const double X = (T - 1) * (N / T) * double(m.hidden_size) * 4;
  total += (2 + (recompute ? 14 : 10) * double(m.num_layers) + 3) * X + (T - 1) * N * 24;
  total += 2 * (T - 1) / T * 8;
  // The routing of this step's micro-batch on every rank of the expert group.
  const int64_t experts = m.num_experts, mine = g.expert->rank();
  const int64_t local = experts / int64_t(E);
  const double count_bytes = t.device().is_cpu() ? 8 : 4;
  const std::vector<const model::RouterRecord*> records = t.model().router_records(t.activations());
  for (const model::RouterRecord* r : records) {
    Tensor counts = Tensor::zeros({experts}, DType::F64), all = Tensor::zeros({experts * int64_t(E)}, DType::F64);
    for (int64_t e = 0; e < experts; ++e) counts.set_flat(e, double(r->count[size_t(e)]));
    g.expert->wait(g.expert->all_gather(counts, all));  // between steps: not counted in any
    double sent = 0, received = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const bool here = e / local == mine;
      for (int64_t src = 0; src < int64_t(E); ++src) {
        const double c = all.get_flat(src * experts + e);
        if (src == mine && !here) sent += c;
        if (src != mine && here) received += c;
      }
    }
    const double rows = (sent + received) * double(m.hidden_size) * 4;
    const double exchange = (E - 1) * double(experts) * count_bytes;
    total += (recompute ? 2 : 1) * exchange + (recompute ? 3 : 2) * rows;
  }
  total += 2 * (SE - 1) / SE * 8;
  total += 2 * (W - 1) / W * 8 * (train::StepVotes::kSlots + double(m.num_layers * experts));
  return total;
}

}  // namespace fsdp::test
