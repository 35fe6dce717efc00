// The FSDP engine: owns each unit's shard of the flat parameters (fp32 master) with its
// gradient and AdamW moments, and serves the model full parameters on demand.
//
// Frozen parameters (LoRA's base, param_units.h) live apart, in FrozenShards
// (frozen_shards.h): sharded and gathered with their unit, never reduced or updated, with
// no gradient or optimizer state. A unit whose parameters are all frozen (the embedding
// and the head under LoRA) has an empty trainable buffer: nothing of it is gathered,
// reduced or stepped.
//
// Per micro-batch, for unit u (see Note [FSDP unit lifecycle] in fsdp_engine.cpp):
//   before_forward(u)   wait for u's all-gather (issued earlier as a prefetch, or now),
//                       issue the all-gathers of the next units up to prefetch_limit
//   after_forward(u)    FULL_SHARD and HYBRID_SHARD free u's full parameters (except the
//                       last unit, whose backward follows at once); SHARD_GRAD_OP and
//                       HYBRID_SHARD_ZERO2 keep them for backward
//   before_backward(u)  re-gather u if it was freed, prefetch the unit backward needs next
//   after_backward(u)   on the last micro-batch of a step, reduce-scatter u's gradient
//                       (asynchronously: the next unit's backward overlaps it), free u's
//                       full parameters and complete unit u+1's reduce-scatter; on earlier
//                       micro-batches keep the full gradient and accumulate (FSDP's no_sync)
//   skip_backward(u)    u's backward will not run this pass: backward prefetching passes it
//   finish()            wait for outstanding reduce-scatters, replicate-group
//                       all-reduce (HYBRID_SHARD, HYBRID_SHARD_ZERO2), free whatever is still gathered
//
// A unit another unit reads (UnitLayout::reads_unit: the tied embedding the head reads) is
// used twice per pass; its gradient is reduced after its last backward use only (Note
// [Units used twice] in fsdp_engine.cpp).
//
// Strategies: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (every rank holds everything and
// gradients are all-reduced, i.e. DDP), HYBRID_SHARD (FULL_SHARD within the shard group,
// all-reduce shards across the replicate group), HYBRID_SHARD_ZERO2 (the same with
// SHARD_GRAD_OP within the group); PyTorch FSDP's names and behaviour (sharding_strategy.h).
// Mixed precision (PyTorch FSDP's MixedPrecision): parameters are all-gathered in
// param_dtype and handed to the model in its compute dtype; gradients come back in the
// compute dtype and are reduce-scattered in reduce_dtype; master weights, gradient shards
// and moments are fp32. Each conversion is a cast kernel on the compute stream, done only
// where two of those dtypes differ (bf16 compute with bf16 params and reductions: none
// but the fp32 master -> bf16 cast before the gather and the bf16 -> fp32 gradient shard).
// On the CPU backend compute is fp32: a bf16 param_dtype halves the all-gather volume
// and the model computes on the bf16-rounded parameters held in fp32.
//
// Tensor parallelism (model/tensor_parallel.h; groups.tensor of more than one rank): each
// unit's layout is this tensor rank's slices, and its flat buffer is sharded over the
// shard group exactly as one rank's would be. The slots every tensor rank holds whole (the
// norm weights) get partial gradients (each rank saw its rows of the sequence): on the
// micro-batch that reduces, their part of the full gradient is all-reduced over the tensor
// group before the reduce-scatter. grad_norm counts every element of the model once: the
// split slots on every tensor rank, the whole ones on tensor rank 0, summed over the shard
// group and then the tensor group.
//
// Expert parallelism (model/expert_parallel.h; expert units, UnitLayout::experts_of): an
// expert unit holds this rank's experts of one block and is sharded over groups.expert_shard
// (the shard group's ranks that hold the same experts) instead of the shard group, with
// its own all-gathers and reduce-scatters on that group; it replicates over the replicate
// group like every unit (HYBRID_SHARD, HYBRID_SHARD_ZERO2). It is used right after its block in the schedule.
// grad_norm needs nothing more: the shard group's ranks hold every expert unit's shards
// between them (each expert rank its experts, each expert-shard rank its shard), so its
// one all-reduce still counts every element once.
//
// Device: every buffer lives on options.device (the host, or the rank's GPU, where the
// collectives are NCCL's on tensors and all the engine's work is stream-ordered: nothing
// here makes the host wait for the GPU except grad_norm, which reads back the local sum of
// squares and then the all-reduced one).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/buffer_pool.h"
#include "fsdp/fsdp/frozen_shards.h"
#include "fsdp/fsdp/shard_math.h"
#include "fsdp/fsdp/sharding_strategy.h"
#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"
#include "fsdp/optim/optimizer.h"

namespace fsdp {

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  DType param_dtype = DType::F32;   // all-gather dtype
  DType reduce_dtype = DType::F32;  // reduce-scatter dtype
  int prefetch_limit = 2;           // gathered units alive ahead of the one computing
  Device device = Device::cpu();    // where shards, buffers and collectives live
  DType compute_dtype = DType::F32; // the model's dtype: params() / grads() are in it
};

class FsdpEngine final : public model::ParamProvider {
 public:
  FsdpEngine(const std::vector<model::UnitLayout>& units, dist::ProcessGroups& groups, const FsdpOptions& options);
  ~FsdpEngine() override;

  // Fills every rank's shards from a function that writes elements [begin, begin+n) of
  // unit u into a float32 tensor (seeded init or a Hugging Face import): no rank ever
  // materialises a whole unit it does not own.
  // On a GPU the fill writes a host tensor, uploaded unit by unit.
  template <typename Fill>
  void init_shards(Fill&& fill) {
    for (int u = 0; u < num_units(); ++u) {
      Unit& x = units_[u];
      x.shard_cast_stale = true;
      if (x.numel == 0) continue;
      if (x.master.device().is_cpu()) {
        fill(u, x.shard_range.begin, x.master);
      } else {
        const Tensor host = Tensor::zeros(x.master.sizes(), DType::F32);
        fill(u, x.shard_range.begin, host);
        x.master.copy_(host);
      }
    }
  }

  // Fills every rank's frozen shards (FrozenShards::init): fill(u, begin, host uint8 tensor).
  template <typename Fill>
  void init_frozen(Fill&& fill) {
    frozen_.init(std::forward<Fill>(fill));
  }

  // Step structure: begin_step(accum) zeroes gradient state; before each micro-batch
  // begin_micro_batch(i) tells the engine whether this is the last one (i == accum-1), on
  // which gradients are reduced; the model's hooks do the rest.
  void begin_step(int accum_steps);
  void begin_micro_batch(int index);

  // After the last micro-batch: the global gradient norm (one all-reduce of the local
  // squared sums over the shard group, and one over the tensor group), then AdamW on the
  // local shards.
  double grad_norm();
  void optimizer_step(const optim::AdamWConfig& cfg, double lr, int64_t step, double grad_scale);

  // model::ParamProvider
  Tensor params(int unit) override;
  Tensor grads(int unit) override;
  Tensor frozen(int unit) override { return frozen_.full(unit); }
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  void skip_backward(int unit) override;
  void finish() override;

  int num_units() const { return int(units_.size()); }
  Device device() const { return opt_.device; }
  const ShardRange& shard_range(int unit) const { return units_[unit].shard_range; }
  // Written in place only before the first gather (resume); afterwards through optimizer_step.
  const Tensor& master(int unit) const { return units_[unit].master; }
  const Tensor& grad_shard(int unit) const { return units_[unit].grad; }
  const Tensor& exp_avg(int unit) const { return units_[unit].exp_avg; }
  const Tensor& exp_avg_sq(int unit) const { return units_[unit].exp_avg_sq; }
  // This rank's shard of unit u's frozen bytes and where it lies (empty when none).
  const Tensor& frozen_shard(int unit) const { return frozen_.shard(unit); }
  const ShardRange& frozen_range(int unit) const { return frozen_.range(unit); }
  // Bytes of persistent sharded state (master + grad + two moments, and frozen shards) on this rank.
  uint64_t persistent_bytes() const;
  uint64_t frozen_bytes() const { return frozen_.persistent_bytes(); }
  // Bytes of the reusable gathered buffers (parameters, unsharded gradients, staging, and
  // gathered frozen bytes), which the pool never gives back: what the memory plan's
  // engine_memory predicts.
  uint64_t buffer_bytes() const;
  // A whole unit's fp32 parameters gathered on every rank (tests, export): a collective.
  Tensor gather_full(int unit);

 private:
  using Buffer = BufferPool::Buffer;
  struct Unit {
    dist::Communicator* comm = nullptr;  // the group it is sharded over (an expert unit's own)
    bool direct = false;  // a one-rank group in fp32: the master shard IS the full unit
    int64_t numel = 0;
    int64_t padded = 0;  // shard_range.size * shard-group size: the gathered buffer's extent
    ShardRange shard_range;
    std::vector<optim::DecaySegment> segments;
    Tensor master, grad, exp_avg, exp_avg_sq;  // fp32 shards
    Tensor shard_cast;                         // param_dtype copy of master (when not fp32)
    bool shard_cast_stale = true;              // master changed since shard_cast was made
    Buffer* full = nullptr;                    // gathered parameters, in the compute dtype
    Buffer* gather_staging = nullptr;          // param_dtype all-gather target (when not the compute dtype)
    dist::Request gather_req;
    bool gather_pending = false;
    Buffer* full_grad = nullptr;               // full gradient being accumulated (compute dtype)
    Buffer* reduce_send = nullptr;             // reduce_dtype copy of full_grad (when not the compute dtype)
    Tensor reduce_recv;                        // reduce_dtype shard (when not fp32)
    dist::Request reduce_req;
    bool reduce_pending = false;
    std::string nvtx_forward, nvtx_backward;  // range names, made once ("layers.3 forward")
    bool skips_backward = false;               // this pass runs no backward for it (skip_backward)
    // Tensor parallelism: the slots every tensor rank holds whole, as [begin, end) runs of
    // the unit (adjacent slots merged), and the runs of this rank's shard (in shard
    // coordinates) that hold split slots: what grad_norm counts off tensor rank 0.
    std::vector<std::pair<int64_t, int64_t>> whole_runs, split_runs_in_shard;
  };
  void find_tensor_runs(const model::UnitLayout& layout, Unit& x);
  void issue_gather(int unit);
  void wait_gather(int unit);
  void reduce_gradient(int unit);
  void complete_reduce(int unit);
  void build_schedule();
  int forward_position(int unit) const;   // of the unit's current forward use
  int backward_position(int unit) const;  // of the unit's current backward use
  void prefetch(const std::vector<int>& order, int position, bool backward);

  std::vector<model::UnitLayout> layouts_;
  std::vector<Unit> units_;
  // The units in the order a pass uses them (a unit read by another appears again right
  // after its reader), backward's being forward's reversed; each unit's positions in both,
  // its uses so far in this pass (reset by finish), and the head's forward position.
  std::vector<int> forward_order_, backward_order_;
  std::vector<std::vector<int>> forward_positions_, backward_positions_;
  std::vector<int> forward_uses_, backward_uses_;
  int last_unit_position_ = 0;
  dist::Communicator& shard_;
  dist::Communicator& replicate_;
  dist::Communicator* tensor_ = nullptr;  // null: no tensor parallelism
  FsdpOptions opt_;
  BufferPool pool_;
  FrozenShards frozen_;
  int accum_steps_ = 1;
  bool sync_ = true;    // this micro-batch reduces gradients
  Tensor grad_flat_;    // every unit's fp32 gradient shard, back to back (Unit::grad are slices)
  Tensor norm_buf_;     // [1] float64 on the device, for the grad-norm all-reduce (no per-step allocation)
};

}  // namespace fsdp
