// The sparse mixture-of-experts MLP of Mixtral, an MlpSublayer (mlp.h), routed exactly as
// transformers 4.x's MixtralSparseMoeBlock:
//
//   h = rmsnorm(x) ; logits = Linear_router(h)                      [N, E]
//   p = softmax(logits) in float32 ; top-k experts e_j per token ; w_j = p_{e_j} / sum_i p_{e_i}
//   (with auxiliary-loss-free balancing the top-k is of p + b, b the layer's bias: router_bias.h)
//   out = x + sum_j w_j * expert_{e_j}(h),  expert_e(h) = W2_e (silu(W1_e h) * W3_e h)
//
// Dropless: every (token, choice) pair is computed. The pairs are sorted by expert (a
// stable counting sort, moe_permute.h) so each expert's rows are one contiguous group,
// and each expert's two GEMMs run over its group. The group sizes are read back to the
// host once per layer per forward (the one host synchronisation of the layer; under expert
// parallelism on a GPU, of the counts exchanged on the device: Note [Expert counts on a
// GPU] in moe_dispatch.h); the backward reuses them. Nothing here uses floating-point atomics: the same bits on every
// run, for any thread count.
//
// The forward also records the routing statistics the router losses need (mlp.h's
// RouterRecord); their gradient arrives in MlpGrads::router_loss (router_loss.h).
//
// Note [Experts under tensor parallelism]
// Megatron-LM's expert tensor parallelism with sequence parallelism, the dense MLP's
// pattern (mlp_dense.h, Note [Sequence parallelism]): x holds this rank's N / T rows; the
// norm runs on them and an all-gather brings all N rows h to every tensor rank. The router
// (whole, the same bits on every rank) routes all N tokens there, so the logits, the
// choices, the sort and the group sizes are the same on every rank of the group, bit for
// bit (they must be: the ranks' GEMM shapes follow them); each expert's w1|w3 are
// this rank's F / T rows (column-parallel) and w2 its F / T columns (row-parallel), so
// each expert's output ys is a partial sum over the tensor group. The combine is linear in
// ys: sum_j w_j ys_j of the partial outputs is a partial sum too, and a reduce-scatter
// returns this rank's rows, to which x is added. Backward mirrors it:
//   d(out) rows all-gathered to [N, C] (whole on every rank) ; dys = w_j d(out): whole ;
//   dweight = <d(out), ys>: partial, so dlogits' routing part is partial and the router's
//   gradient and its dx sum correctly over the group (the engine all-reduces whole slots;
//   the reduce-scatter below sums dx) ; each expert's dW on its own slice, complete ;
//   dxs partial ; dh [N, C] = dlogits W_router + gathered dxs, reduce-scattered to rows.
// The router losses are computed from all N tokens' probabilities on every rank: their
// share of dlogits is whole, not partial, and would be counted T times by those sums, so
// each rank adds 1/T of it (Llama::enqueue_forward_backward scales router_loss_grad):
// the same code on every rank, and the scaling exact for T a power of two. Their reported values and
// the expert counts are whole on every rank too: the trainer counts one tensor rank's.
//
// Under expert parallelism (expert_parallel.h) the routing is this rank's tokens' as above,
// and the sorted pairs travel to their experts' ranks and back between the gather and the
// combine (Note [Expert-parallel dispatch] in moe_dispatch.h); the experts this rank holds
// are in the block's expert unit (UnitParams::expert_params), the rest of the layer in the
// block's unit. The expert-side tensors (xr, gu, act; their gradients) then hold the
// received rows, expert-major, sized for the worst routing (max_received_rows). Under both
// (Note [Experts under expert and tensor parallelism] in moe_dispatch.h) the dispatch runs on
// the gathered rows, between the all-gather and the reduce-scatter above, and the expert unit
// holds this rank's tensor slices of its experts.
//
// Note [LoRA on expert-parallel experts]
// Where the adapters live: LoRA's layout (peft_units.cpp, lora_units) is built on the plain
// units, so an expert's frozen w1|w3 and w2 and their adapters (Mixtral's targets w1, w2,
// w3) go where the expert goes: into the block's expert unit "layers.<l>.experts", which
// holds this rank's experts' frozen base (dense or NF4: each expert's weight is quantized
// on its own, as one process quantizes it) and their adapters, sharded over the expert-data-
// parallel ranks (ProcessGroups::expert_shard) for both its trainable and frozen buffers,
// with its own gradient accounting; the block unit keeps attention's and the router's
// adapters. Every adapter's whole_offset is its offset in one process's LoRA block, so seeded
// initialisation, checkpoints (format version 3 runs), PEFT exports and lora.init_from see
// one process's layout.
// How dropout rows are keyed: one process draws an expert adapter's mask at row
// first_row + p, p the pair's position in its micro-batch's sorted order (an expert's run
// starts at its group offset), first_row = the micro-batch's first sample x T. Under expert
// parallelism an expert's input holds the rows every rank of the group sent it; each row
// keeps its source's number: the rows of the (source i, local expert e) block are source
// i's sorted pairs [block_source, + block_rows) (DispatchLayout, from the exchanged [E, n]
// counts), and the E ranks of an expert group are consecutive data-parallel ranks reading
// micro-batches of N = B x T tokens each step, so source i's first_row is this rank's plus
// (i - rank) x N. The adapter draws each block's mask as its own run (DropoutRows), so
// every (token, choice) row is dropped exactly as one process drops it, in the forward,
// the backward and any recompute.
#pragma once

#include <vector>

#include "fsdp/model/linear.h"
#include "fsdp/model/lora_adapter.h"
#include "fsdp/model/mlp.h"
#include "fsdp/model/moe_dispatch.h"
#include "fsdp/model/sequence_parallel.h"

namespace fsdp::model {

// What selective checkpointing keeps (Note [Saved tensors]): the router's GEMM output and
// its routing decision (probabilities, choices, weights, the sort and the group offsets:
// recomputing them would need the top-k, the sort and a host read-back again) and each
// expert's GEMM outputs (gu, ys); it recomputes the norm (h, rstd), the gathered rows (xs)
// and SwiGLU (act). The router statistics are every block's own (the router losses pool
// all layers after the forward).
// Under tensor parallelism (Note [Experts under tensor parallelism]) h and rstd are this
// rank's N / T rows, F is this rank's F / T columns of every expert, the rest covers all N.
struct MoeMlpSaved final : MlpSaved {
  Tensor h;        // [N, C]     rmsnorm(x)                                  Cheap
  Tensor rstd;     // [N]        its 1/rms (stat dtype)                      Cheap
  Tensor logits;   // [N, E]     router logits (compute dtype)               Expensive
  Tensor probs;    // [N, E]     softmax(logits) (stat dtype)                Expensive
  Tensor lse;      // [N]        logsumexp(logits) (stat dtype)              Expensive
  Tensor expert;   // [N, k]     chosen experts (int32)                      Expensive
  Tensor weight;   // [N, k]     their renormalised weights (stat dtype)     Expensive
  Tensor count;    // [E]        pairs per expert (int32, device)            Expensive
  Tensor order;    // [N*k]      sorted position -> flat pair t*k+j (int32)  Expensive
  Tensor slot;     // [N*k]      flat pair -> sorted position (int32)        Expensive
  Tensor offsets;  // [E+1]      expert e's rows are [offsets[e], offsets[e+1]) (int32)  Expensive
  Tensor xs;       // [N*k, C]   h gathered into expert order                Cheap
  Tensor gu;       // [N*k, 2F]  each expert's gate | up                     Expensive
  Tensor act;      // [N*k, F]   silu(gate) * up                             Cheap
  Tensor ys;       // [N*k, C]   each expert's output                        Expensive
  // Expert parallelism only (gu and act are then [R, ...], R = max_received_rows):
  Tensor xr;       // [R, C]     the rows this rank's experts received, expert-major     Cheap
  DispatchLayout layout;             // where the pairs went, from the last forward
  Tensor offsets_host;  // [E+1]  page-locked host copy of offsets (model on a GPU; made by the first forward)
  std::vector<int64_t> group_begin;  // offsets on the host (E+1), from the last forward; [E]: the kept pairs
  RouterRecord record;               // prob_sum, lse_sq_sum: Statistic

  void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) override;
  const RouterRecord* router() const override { return &record; }
};

struct MoeMlpGrads final : MlpGrads {
  Tensor dys;      // [N*k, C]
  Tensor dact;     // [N*k, F]   (expert parallelism: [R, F], the received rows)
  Tensor dgu;      // [N*k, 2F]  ([R, 2F])
  Tensor dxs;      // [N*k, C]
  Tensor dxr;      // [R, C] expert parallelism only: the received rows' dxs
  Tensor dweight;  // [N, k] stat dtype
  Tensor dlogits;  // [N, E] compute dtype

  // router_loss.aux_grad is bound too, and zeroed by make_grads (a dense run never sets it).
  void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) override;
};

// Per local expert, the dropout numbering of its received rows (expert parallelism).
using ExpertRowRuns = std::vector<std::vector<RowRun>>;

class MoeMlp final : public MlpSublayer {
 public:
  // Resolves mlp_norm, the router and every expert's w1|w3 and w2 in a block's layout;
  // `bias` is the layer's routing bias (router_bias.h), read at every forward; `sp` the
  // tensor group's mappings (null: none).
  // With expert parallelism (`ep` on) the experts are this rank's, resolved in
  // `experts` (the block's expert unit).
  MoeMlp(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp = nullptr, RouterBiasRef bias = {},
         const ExpertDispatch* ep = nullptr, const UnitLayout* experts = nullptr);

  void forward(const Tensor& x, const UnitParams& p, MlpSaved& saved, const Tensor& out) const override;
  void recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const override;
  void backward(const Tensor& x, const MlpSaved& saved, const UnitParams& p, const Tensor& dres, const Tensor& dh,
                MlpGrads& g) const override;

 private:
  void route(const MoeMlpSaved& s, int64_t N) const;
  // The group sizes (and under expert parallelism the dispatch layout) on the host.
  void routing_to_host(MoeMlpSaved& s, int64_t N) const;
  void read_group_sizes(MoeMlpSaved& s, int64_t N) const;
  void record_group_sizes(MoeMlpSaved& s, int64_t N) const;
  // Drops the pairs over capacity (moe.capacity_factor), re-reading the kept group sizes.
  void apply_capacity(MoeMlpSaved& s, int64_t N) const;
  // The local experts over their runs of rows [begin[e], begin[e+1]) (the sorted pairs,
  // or the received ones under expert parallelism).
  // `runs` numbers each local expert's rows for LoRA's dropout (Note [LoRA on expert-parallel
  // experts]); null: each run's rows from its `begin` on, as the sort numbers them.
  void experts_forward(const std::vector<int64_t>& begin, const Tensor& in, const MoeMlpSaved& s, const Tensor& out,
                       const UnitParams& p, const ExpertRowRuns* runs = nullptr) const;
  void experts_swiglu(const std::vector<int64_t>& begin, const MoeMlpSaved& s) const;
  void experts_backward(const std::vector<int64_t>& begin, const Tensor& dy, const Tensor& in, const MoeMlpSaved& s,
                        const UnitParams& p, MoeMlpGrads& g, const Tensor& dx,
                        const ExpertRowRuns* runs = nullptr) const;
  // The expert unit's buffers (expert parallelism), or the block's.
  UnitParams expert_params(const UnitParams& p) const;

  void combine(const MoeMlpSaved& s, const Tensor& x, const Tensor& out, int64_t N) const;

  const SequenceParallel* sp_;
  const ExpertDispatch* ep_;  // null: every expert is local
  int64_t hidden_ = 0, ffn_ = 0, experts_ = 0, k_ = 0;  // C, F (this tensor rank's), E, k
  double eps_ = 0;
  ParamRef norm_;  // mlp_norm
  Linear router_;
  RouterBiasRef bias_;
  std::vector<Linear> gate_up_, down_;  // per local expert: w1|w3 [2F, C], w2 [C, F]
};

}  // namespace fsdp::model
