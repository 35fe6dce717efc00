// Note [Expert-parallel dispatch]
// Under expert parallelism (expert_parallel.h) an MoE layer routes this rank's N tokens as
// one process does (router, float32 softmax, top-k, the stable sort of the N k (token,
// choice) pairs by expert: mlp_moe.h), then moves every pair to the rank holding its expert
// and back, Megatron-LM's all-to-all token dispatcher:
//
//   counts    this rank's pairs per expert [n], all-gathered over the expert group: every
//             rank then knows the whole [E, n] count matrix, so the all-to-all's send and
//             receive counts need no second exchange. On the CPU they are on the host
//             already (the group sizes the layer reads back anyway) and travel as float64;
//             on a GPU see Note [Expert counts on a GPU];
//   dispatch  the sorted pairs' rows [N k, C] are already grouped by destination (expert
//             rank r holds experts [r n/E, (r+1) n/E), contiguous in the sort), so they go
//             out as they lie: all_to_all_v into the staging buffer, where they arrive
//             source rank by source rank, each source's rows by expert; then one block copy
//             per (source, local expert) regroups them expert by expert, each expert's rows
//             by source rank, then in the source's token order. A fixed order that depends
//             only on the routing: the same bits on every run;
//   experts   each local expert's two GEMMs over its contiguous run of received rows;
//   combine   the reverse: outputs regrouped source by source, all_to_all_v back, so each
//             rank gets its own pairs' outputs in its sorted order, and the combine (each
//             token's k outputs in choice order) runs exactly as without expert parallelism.
//
// Backward mirrors it: the gradient of a dispatch is a combine and vice versa (the same
// two all-to-alls, the other way round): dys (sorted, local) is dispatched to the experts,
// their input gradients dxs are combined back. Dropless: the expert side is sized for the
// worst routing (max_received_rows), so any routing fits and the function is one
// process's; only the order of the rows inside each expert's GEMM (and so the summation
// order of its weight gradient) differs from one process's, by float rounding.
//
// Activation checkpointing: full runs the layer's forward again, counts and both
// all-to-alls included (the routing is deterministic, so the counts and the layout are the
// same); selective keeps the routing, the expert GEMM outputs and the returned outputs, and
// dispatches the normed rows again to recompute the experts' inputs (one all-to-all).
//
// Note [Expert counts on a GPU]
// On a GPU the routing's counts are on the device (MoeMlpSaved::count, int32), and the
// layer has to read something back anyway (the group sizes decide the GEMM shapes). So the
// device all-gathers the counts first and the host reads back the exchanged [E, n] matrix,
// once: this rank's row is its group sizes, the whole matrix the dispatch layout. The one
// host read-back per MoE layer that one process has, of E n integers instead of n + 1.
//   all-gather  of the int32 counts moved as their bytes (uint8: an all-gather sums
//               nothing, and every backend moves bytes exactly), on the expert group's
//               NCCL comm stream after an event on the compute stream (the routing kernels
//               wrote the counts there); its wait makes the compute stream wait for it on
//               the device (Note [NCCL stream ordering]: the host does not block);
//   read-back   one device-to-host copy on the compute stream into page-locked memory,
//               which the host waits for: it follows the all-gather by that stream wait,
//               so no other synchronisation is needed;
//   all_to_all_v  on the comm stream again, after an event on the compute stream (where
//               the gather of the sorted rows, or the combine's regroup, wrote its input);
//               its wait orders the compute stream after it, and the regroup copies
//               (device-to-device copies on the compute stream, Note [Tensor copies across
//               devices]) and the expert GEMMs read the received rows from there. The host
//               never waits for the tokens.
// Bytes: (E-1) n 4 per exchange (float64's (E-1) n 8 on the CPU).
//
// Note [Experts under expert and tensor parallelism]
// With parallel.tensor T > 1 too the experts are split both ways: Megatron-core's expert
// tensor parallelism with its degree equal to T (its default). The expert group is the E
// ranks of the mesh's expert dimension that share this rank's tensor index, and each rank
// holds its tensor slices (w1|w3 rows, w2 columns: Note [Experts under tensor parallelism]
// in mlp_moe.h) of its expert rank's n/E experts. The dispatch sits between the sequence-
// parallel all-gather and the reduce-scatter: after the gather every tensor rank of a group
// holds the same N rows and routes them to the same bits, so each sends the same pairs to its
// expert peers of its own tensor index, which compute their slice's partial outputs; the
// combine brings them back, and the reduce-scatter over the tensor group, which sums the
// partial combine anyway, sums the slices. Backward likewise (dys whole, the returned dxs
// partial, summed by the same reduce-scatter). Nothing in the layer changes but which slices
// a rank holds: the tensor-parallel slices, their checkpoints and export, and the routing
// that is the same on every tensor rank are reused as they are.
// The cost: every tensor rank of a group sends the same rows, so the expert group's
// all-to-alls carry T copies of each row, where torchtitan's tp2ep (each tensor rank
// routing and dispatching only its own N/T rows, to E x T ranks of whole experts) moves
// each row once but needs whole experts per rank, a checkpoint layout of its own and a
// routing that differs between the tensor ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/expert_parallel.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

// Where every pair goes and comes from, for one layer's forward (host arithmetic).
struct DispatchLayout {
  std::vector<int64_t> send_rows;     // [E] rows this rank sends to each expert rank
  std::vector<int64_t> recv_rows;     // [E] rows it receives from each
  std::vector<int64_t> expert_begin;  // [n/E + 1] local expert e's rows of the received ones
  // Per (source rank i, local expert e), at i * n/E + e: the block's rows, and where it
  // starts in the staging (source-major) and in the expert-major order.
  std::vector<int64_t> block_rows, block_staged, block_grouped;
  // And where the block starts in its source's sorted order (the source's pairs of experts
  // before it): how the source numbers those rows (Note [LoRA on expert-parallel experts]).
  std::vector<int64_t> block_source;
  int64_t received = 0;  // rows received (the sum of recv_rows)
};

// The dispatch layout of an expert rank `rank` of `ranks`, each holding `n / ranks`
// experts, given every rank's per-expert pair counts `counts` ([ranks * n], rank-major).
// Pure arithmetic (tested without ranks).
DispatchLayout dispatch_layout(const std::vector<int64_t>& counts, int64_t n, int rank, int ranks);

class ExpertDispatch {
 public:
  // Off (no group, or a group of one): every expert is local.
  explicit ExpertDispatch(const LlamaConfig& cfg, ExpertGroup* group = nullptr);

  bool on() const { return group_ != nullptr && group_->size() > 1; }
  int rank() const { return on() ? group_->rank() : 0; }
  int size() const { return on() ? group_->size() : 1; }
  int64_t first_expert() const { return int64_t(rank()) * local_experts_; }
  int64_t local_experts() const { return local_experts_; }

  // This pass's scratch, two [R, C] buffers (R = max_received_rows; unused when off): the
  // all-to-alls' staging, and the grouped rows that only pass through (the experts'
  // outputs on their way back, the gradients arriving for them), shared by every layer.
  // On a GPU also makes the count exchange's two small buffers, once.
  void use(const Tensor& staging, const Tensor& grouped);
  const Tensor& grouped_scratch() const { return grouped_; }

  // counts: this rank's pairs per expert [n]; all-gathers them over the group (a collective).
  DispatchLayout exchange(const std::vector<int64_t>& counts) const;
  // The same from counts on a GPU ([n] int32, the routing's; Note [Expert counts on a
  // GPU]): all-gathered on the device and read back once; `mine` gets this rank's row.
  DispatchLayout exchange(const Tensor& counts, std::vector<int64_t>& mine) const;
  // local [N k, C] rows sorted by expert -> grouped [received, C] rows, expert-major.
  void dispatch(const DispatchLayout& layout, const Tensor& local, const Tensor& grouped) const;
  // grouped [received, C] expert-major -> local [N k, C] in this rank's sorted order.
  void combine(const DispatchLayout& layout, const Tensor& grouped, const Tensor& local) const;

 private:
  // The layout of the exchanged counts, checked against the expert-side buffers.
  DispatchLayout layout_of(const std::vector<int64_t>& all) const;
  // Copies each (source, expert) block from one order to the other.
  void regroup(const DispatchLayout& layout, const Tensor& from, const Tensor& to, bool to_grouped) const;

  ExpertGroup* group_ = nullptr;
  int64_t experts_ = 0, local_experts_ = 0, hidden_ = 0;
  Tensor counts_mine_, counts_all_;  // float64 host buffers of the count exchange
  Tensor counts_device_, counts_host_;  // [E * n] int32: a GPU's exchange, its page-locked read-back
  Tensor staging_, grouped_;
};

}  // namespace fsdp::model
