// Note [FSDP unit lifecycle]
// A unit's full parameters exist only between its gather and its release:
//   forward:   before_forward waits for the gather (issued as a prefetch while earlier
//              units computed) and issues the next prefetch_limit units' gathers;
//              after_forward releases under FULL_SHARD and HYBRID_SHARD (within the
//              shard group: reshards_after_forward, sharding_strategy.h), except for the
//              last unit, whose backward runs immediately (PyTorch FSDP's root is likewise
//              not resharded). SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 keep it for backward.
//   backward:  before_backward re-gathers if released and prefetches the units backward
//              needs next (lower indices); after_backward, on the micro-batch that
//              synchronises, issues the reduce-scatter and releases the parameters, then
//              completes the previous unit's reduce-scatter, which overlapped this unit's
//              backward: one reduce-scatter in flight, so at most two unsharded gradients
//              (the one computing and the one reducing) exist at once, as in PyTorch FSDP,
//              not one per unit. finish() completes the last.
// Gradient accumulation (FSDP's no_sync): on the other micro-batches the full gradient
// buffer of every unit is kept and accumulated into; only the last micro-batch reduces.
// That costs one unsharded gradient per unit between micro-batches (the whole model's
// gradients in fp32, like PyTorch's no_sync) and saves (accum-1) reduce-scatters.
// All ranks call the same hooks in the same order, so their collectives match one to
// one, as MPI and NCCL require. A unit's frozen bytes (frozen_shards.h) are gathered and
// released beside its trainable buffer, hook for hook; they have no gradient to reduce.

// Note [Units used twice]
// With tied embeddings the head reads the embedding unit's table (UnitLayout::reads_unit),
// so a pass uses that unit twice in forward and twice in backward:
//   forward   embedding, layers.0 .. layers.L-1, head, embedding'
//   backward  embedding', head, layers.L-1 .. layers.0, embedding
// (the primed use is the head's). The engine keeps that schedule and counts each unit's
// uses in the pass (finish() resets the counts), so that
//   - prefetching follows the schedule: the table's gather for the head overlaps the last
//     block's forward, and (FULL_SHARD, HYBRID_SHARD) its gather for the embedding's backward overlaps
//     the first blocks' backward;
//   - whatever is used at the end of forward stays gathered into backward (the head, and
//     the table with it), as the last unit always did;
//   - after the head's backward use FULL_SHARD and HYBRID_SHARD free the table (gathered
//     again at the end), SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 keep it until its last use;
//   - both uses accumulate into the unit's one gradient buffer, which is reduced once, after
//     the last backward use: the sum of both uses' gradients, which is what autograd gives a
//     shared parameter, and one master copy and one set of AdamW moments for it.
// Per micro-batch under FULL_SHARD the V x C table is gathered 3 times and reduced once,
// where separate embedding and lm_head weights cost 4 gathers and 2 reductions of V x C.
// The alternative, embedding and head as one unit, would keep the table gathered through
// every block's forward and backward (it is used at both ends of each), for no less traffic.

// Memory categories (fsdp/core/memory_category.h, engine_categories.h): the shards and
// moments are "sharded state", the frozen shards "frozen base", gradient shards and full
// gradients "gradients", gathered units (trainable and frozen) "gathered parameters"; a
// pool buffer takes the category of its current use and, between uses, "fsdp buffer pool
// (idle)", an idle cache, so a memory snapshot shows what the pool's buffers hold at its
// moment rather than what they were first allocated for.
#include "fsdp/fsdp/fsdp_engine.h"

#include <algorithm>
#include <cmath>

#include "fsdp/core/memory_category.h"
#include "fsdp/core/nvtx.h"
#include "fsdp/fsdp/engine_categories.h"
#include "fsdp/fsdp/unit_decay.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp {
using engine_category::gathered_parameters;
using engine_category::gradients;
using engine_category::sharded_state;

namespace {

// The group a unit is sharded over: an expert unit's (expert parallelism: the ranks holding
// the same experts), or the shard group. Without expert parallelism both are one group.
dist::Communicator& shard_group_of(const model::UnitLayout& u, dist::ProcessGroups& groups) {
  if (u.experts_of >= 0 && groups.expert_shard != nullptr) return *groups.expert_shard;
  return *groups.shard;
}

// Each unit's group, in unit order.
std::vector<dist::Communicator*> shard_groups(const std::vector<model::UnitLayout>& units,
                                              dist::ProcessGroups& groups) {
  std::vector<dist::Communicator*> out;
  for (const auto& u : units) out.push_back(&shard_group_of(u, groups));
  return out;
}

// Elements of the largest padded trainable unit: every float buffer of the pool holds one.
int64_t max_padded_numel(const std::vector<model::UnitLayout>& units, dist::ProcessGroups& groups) {
  int64_t m = 0;
  for (const auto& u : units)
    if (u.numel > 0) m = std::max(m, padded_numel(u.numel, shard_group_of(u, groups).size()));
  return m;
}

}  // namespace

FsdpEngine::FsdpEngine(const std::vector<model::UnitLayout>& units, dist::ProcessGroups& groups,
                       const FsdpOptions& options)
    : layouts_(units),
      shard_(*groups.shard),
      replicate_(*groups.replicate),
      tensor_(groups.tensor != nullptr && groups.tensor->size() > 1 ? groups.tensor.get() : nullptr),
      opt_(options),
      pool_(options.device, max_padded_numel(units, groups),
            FrozenShards::max_padded_bytes(units, shard_groups(units, groups))),
      frozen_(units, shard_groups(units, groups), pool_, options.device) {
  auto floating = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  FSDP_CHECK(floating(opt_.param_dtype), "fsdp.param_dtype must be float32, bfloat16 or float16, got {}",
             dtype_name(opt_.param_dtype));
  FSDP_CHECK(floating(opt_.reduce_dtype), "fsdp.reduce_dtype must be float32, bfloat16 or float16, got {}",
             dtype_name(opt_.reduce_dtype));
  FSDP_CHECK(floating(opt_.compute_dtype), "the compute dtype must be float32, bfloat16 or float16, got {}",
             dtype_name(opt_.compute_dtype));
  FSDP_CHECK(opt_.prefetch_limit >= 0, "fsdp.prefetch_limit must be >= 0, got {}", opt_.prefetch_limit);
  const Device dev = opt_.device;
  {
    const memory::CategoryScope tag("scratch/grad norm");
    norm_buf_ = Tensor::zeros({1}, DType::F64, dev);
  }
  const bool fp32 = opt_.param_dtype == DType::F32 && opt_.reduce_dtype == DType::F32 &&
                    opt_.compute_dtype == DType::F32;
  units_.resize(layouts_.size());
  for (size_t u = 0; u < layouts_.size(); ++u) {
    units_[u].comm = &shard_group_of(layouts_[u], groups);
    units_[u].direct = units_[u].comm->size() == 1 && fp32;
  }
  // Every unit's gradient shard is a slice of one flat buffer, so the gradient norm is one
  // reduction and, on a GPU, one read-back per step rather than one per unit.
  // A unit with nothing to train (every parameter frozen) gets empty shards.
  auto range_of = [&](size_t u) {
    const dist::Communicator& c = *units_[u].comm;
    const int64_t numel = layouts_[u].numel;
    return numel == 0 ? ShardRange{} : ::fsdp::shard_range(numel, c.size(), c.rank());
  };
  int64_t grad_total = 0;
  for (size_t u = 0; u < layouts_.size(); ++u) grad_total += range_of(u).size;
  {
    const memory::CategoryScope tag(gradients());
    grad_flat_ = Tensor::zeros({grad_total}, DType::F32, dev);
  }
  int64_t grad_offset = 0;
  build_schedule();
  for (size_t u = 0; u < layouts_.size(); ++u) {
    Unit& x = units_[u];
    x.numel = layouts_[u].numel;
    x.shard_range = range_of(u);
    x.padded = x.shard_range.size * x.comm->size();
    x.segments = decay_segments(layouts_[u]);
    const int64_t s = x.shard_range.size;
    const memory::CategoryScope tag(sharded_state());
    x.master = Tensor::zeros({s}, DType::F32, dev);
    x.grad = grad_flat_.narrow(0, grad_offset, s);
    grad_offset += s;
    x.exp_avg = Tensor::zeros({s}, DType::F32, dev);
    x.exp_avg_sq = Tensor::zeros({s}, DType::F32, dev);
    if (opt_.param_dtype != DType::F32) x.shard_cast = Tensor::zeros({s}, opt_.param_dtype, dev);
    if (opt_.reduce_dtype != DType::F32) {
      const memory::CategoryScope grad_tag(gradients());
      x.reduce_recv = Tensor::zeros({s}, opt_.reduce_dtype, dev);
    }
    x.nvtx_forward = layouts_[u].name + " forward";
    x.nvtx_backward = layouts_[u].name + " backward";
    if (tensor_ != nullptr) find_tensor_runs(layouts_[u], x);
  }
}

// The unit's whole (replicated) slots as merged runs, and the split slots' runs inside
// this rank's shard; every tensor rank's unit has the same layout of both (the splits are
// even), so the all-reduces over the tensor group match element for element.
void FsdpEngine::find_tensor_runs(const model::UnitLayout& layout, Unit& x) {
  const int64_t begin = x.shard_range.begin, end = begin + x.shard_range.valid;
  for (const model::ParamSlot& slot : layout.params) {
    const int64_t a = slot.offset, b = slot.offset + slot.numel;
    if (slot.tp.replicated()) {
      if (!x.whole_runs.empty() && x.whole_runs.back().second == a) {
        x.whole_runs.back().second = b;
      } else {
        x.whole_runs.emplace_back(a, b);
      }
      continue;
    }
    const int64_t lo = std::max(a, begin), hi = std::min(b, end);
    if (lo >= hi) continue;
    if (!x.split_runs_in_shard.empty() && x.split_runs_in_shard.back().second == lo - begin) {
      x.split_runs_in_shard.back().second = hi - begin;
    } else {
      x.split_runs_in_shard.emplace_back(lo - begin, hi - begin);
    }
  }
}

FsdpEngine::~FsdpEngine() {
  // Collectives still in flight reference buffers about to be freed: drain them (only
  // reachable when a step threw half-way).
  for (Unit& x : units_) {
    try {
      if (x.gather_pending) x.comm->wait(x.gather_req);
      if (x.reduce_pending) (x.direct ? replicate_ : *x.comm).wait(x.reduce_req);
    } catch (...) {
    }
  }
}

uint64_t FsdpEngine::buffer_bytes() const { return pool_.bytes(); }

uint64_t FsdpEngine::persistent_bytes() const {
  uint64_t b = 0;
  for (const Unit& x : units_) b += x.master.nbytes() + x.grad.nbytes() + x.exp_avg.nbytes() + x.exp_avg_sq.nbytes();
  return b + frozen_.persistent_bytes();
}

// ---------------------------------------------------------------- schedule

// See Note [Units used twice].
// An expert unit (UnitLayout::experts_of) is used right after its block, which the decoder
// hands out first (and after it in backward): its place in the schedule, whatever its index.
void FsdpEngine::build_schedule() {
  const int n = num_units();
  int last = -1;  // the last unit that is not an expert unit: the head
  for (int u = 0; u < n; ++u) {
    const int of = layouts_[size_t(u)].experts_of;
    FSDP_CHECK(of < n && of != u && (of < 0 || layouts_[size_t(of)].experts_of < 0),
               "unit '{}' holds the experts of unit {}, which is not a block of the model", layouts_[size_t(u)].name,
               of);
    if (of < 0) last = u;
  }
  for (int u = 0; u < n; ++u) {
    if (layouts_[size_t(u)].experts_of >= 0) continue;
    if (u == last) last_unit_position_ = int(forward_order_.size());
    forward_order_.push_back(u);
    for (int x = 0; x < n; ++x)
      if (layouts_[size_t(x)].experts_of == u) forward_order_.push_back(x);
    const int r = layouts_[size_t(u)].reads_unit;
    if (r < 0) continue;
    FSDP_CHECK(r < n && r != u, "unit '{}' reads unit {}, which is not another unit of the model",
               layouts_[size_t(u)].name, r);
    forward_order_.push_back(r);
  }
  backward_order_.assign(forward_order_.rbegin(), forward_order_.rend());
  forward_positions_.assign(size_t(n), {});
  backward_positions_.assign(size_t(n), {});
  for (int i = 0; i < int(forward_order_.size()); ++i) {
    forward_positions_[size_t(forward_order_[size_t(i)])].push_back(i);
    backward_positions_[size_t(backward_order_[size_t(i)])].push_back(i);
  }
  forward_uses_.assign(size_t(n), 0);
  backward_uses_.assign(size_t(n), 0);
}

// A caller that uses a unit more often than the schedule says (hooks driven by hand) is
// taken to repeat its last use.
int FsdpEngine::forward_position(int unit) const {
  const std::vector<int>& p = forward_positions_[size_t(unit)];
  return p[std::min(size_t(forward_uses_[size_t(unit)]), p.size() - 1)];
}

int FsdpEngine::backward_position(int unit) const {
  const std::vector<int>& p = backward_positions_[size_t(unit)];
  return p[std::min(size_t(backward_uses_[size_t(unit)]), p.size() - 1)];
}

// A unit whose backward this pass skips (skip_backward) is passed over in backward.
void FsdpEngine::prefetch(const std::vector<int>& order, int position, bool backward) {
  for (int k = 1; k <= opt_.prefetch_limit && position + k < int(order.size()); ++k) {
    const int u = order[size_t(position + k)];
    if (!(backward && units_[size_t(u)].skips_backward)) issue_gather(u);
  }
}

// ---------------------------------------------------------------- parameters

void FsdpEngine::issue_gather(int unit) {
  if (unit < 0 || unit >= num_units()) return;
  frozen_.issue_gather(unit);
  Unit& x = units_[unit];
  if (x.direct || x.numel == 0 || x.full != nullptr || x.gather_pending) return;
  x.full = pool_.acquire(opt_.compute_dtype, gathered_parameters());
  const Tensor* shard = &x.master;
  if (opt_.param_dtype != DType::F32) {
    // Once per optimizer step, not per gather (FULL_SHARD and HYBRID_SHARD gather twice).
    if (x.shard_cast_stale) cast(x.master, x.shard_cast);
    x.shard_cast_stale = false;
    shard = &x.shard_cast;
  }
  if (opt_.param_dtype == opt_.compute_dtype) {
    x.gather_req = x.comm->all_gather(*shard, x.full->t.narrow(0, 0, x.padded));
  } else {
    x.gather_staging = pool_.acquire(opt_.param_dtype, gathered_parameters());
    x.gather_req = x.comm->all_gather(*shard, x.gather_staging->t.narrow(0, 0, x.padded));
  }
  x.gather_pending = true;
}

void FsdpEngine::wait_gather(int unit) {
  frozen_.wait_gather(unit);
  Unit& x = units_[unit];
  if (x.direct || x.numel == 0) return;
  if (x.full == nullptr && !x.gather_pending) issue_gather(unit);
  if (!x.gather_pending) return;
  x.comm->wait(x.gather_req);
  x.gather_pending = false;
  if (x.gather_staging != nullptr) {
    cast(x.gather_staging->t.narrow(0, 0, x.padded), x.full->t.narrow(0, 0, x.padded));
    pool_.release(x.gather_staging);
  }
}

Tensor FsdpEngine::params(int unit) {
  Unit& x = units_[unit];
  if (x.direct) return x.master.narrow(0, 0, x.numel);
  if (x.numel == 0) return Tensor::empty({0}, opt_.compute_dtype, opt_.device);
  FSDP_CHECK(x.full != nullptr && !x.gather_pending, "unit {} ('{}') used before it was gathered", unit,
             layouts_[unit].name);
  return x.full->t.narrow(0, 0, x.numel);
}

// The NVTX range of a unit's compute opens when its parameters are ready (after the
// gather wait and the prefetches this hook issues) and closes when the model hands the
// unit back, so an nsys timeline shows "layers.3 forward" beside the collectives.
void FsdpEngine::before_forward(int unit) {
  wait_gather(unit);
  prefetch(forward_order_, forward_position(unit), /*backward=*/false);
  nvtx::push(units_[unit].nvtx_forward.c_str());
}

// FULL_SHARD and HYBRID_SHARD free a unit after forward unless the use is at the end of
// the pass (the head, and the table a tied head reads), whose backward follows at once.
void FsdpEngine::after_forward(int unit) {
  nvtx::pop();
  const bool at_the_end = forward_position(unit) >= last_unit_position_;
  ++forward_uses_[size_t(unit)];
  if (!reshards_after_forward(opt_.strategy) || at_the_end) return;
  frozen_.release(unit);
  if (!units_[unit].direct) pool_.release(units_[unit].full);
}

void FsdpEngine::before_backward(int unit) {
  wait_gather(unit);
  prefetch(backward_order_, backward_position(unit), /*backward=*/true);
  nvtx::push(units_[unit].nvtx_backward.c_str());
}

void FsdpEngine::skip_backward(int unit) { units_[unit].skips_backward = true; }

// ---------------------------------------------------------------- gradients

void FsdpEngine::begin_step(int accum_steps) {
  FSDP_CHECK(accum_steps >= 1, "accumulation steps must be >= 1, got {}", accum_steps);
  accum_steps_ = accum_steps;
  fill_(grad_flat_, 0.0);
}

void FsdpEngine::begin_micro_batch(int index) { sync_ = index == accum_steps_ - 1; }

Tensor FsdpEngine::grads(int unit) {
  Unit& x = units_[unit];
  if (x.direct) return x.grad.narrow(0, 0, x.numel);
  if (x.numel == 0) return Tensor::empty({0}, opt_.compute_dtype, opt_.device);
  if (x.full_grad == nullptr) {  // first micro-batch of the step for this unit
    x.full_grad = pool_.acquire(opt_.compute_dtype, gradients());
    fill_(x.full_grad->t.narrow(0, 0, x.padded), 0.0);
  }
  return x.full_grad->t.narrow(0, 0, x.numel);
}

void FsdpEngine::after_backward(int unit) {
  nvtx::pop();
  Unit& x = units_[unit];
  const bool last_use = ++backward_uses_[size_t(unit)] >= int(backward_positions_[size_t(unit)].size());
  // Every strategy reshards here; those that keep units gathered from forward to backward
  // (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2) also keep a unit used again.
  if (last_use || reshards_after_forward(opt_.strategy)) {
    frozen_.release(unit);
    if (!x.direct) pool_.release(x.full);
  }
  if (!sync_ || !last_use) return;  // no_sync, or another use to come: keep accumulating
  if (x.numel > 0) reduce_gradient(unit);  // a frozen-only unit has nothing to reduce
  // Backward runs from the last unit down: the ones above have been reducing meanwhile
  // (the one above, or more when frozen-only units between reduced nothing).
  for (int above = unit + 1; above < num_units(); ++above) complete_reduce(above);
}

void FsdpEngine::reduce_gradient(int unit) {
  Unit& x = units_[unit];
  if (tensor_ != nullptr) {
    // The whole slots' gradients are this rank's rows' share: sum them over the tensor
    // group first (Megatron's all-reduce of sequence-parallel norm gradients), so every
    // tensor rank reduce-scatters and steps the same values.
    const Tensor full = x.direct ? x.grad : x.full_grad->t;
    for (const auto& [a, b] : x.whole_runs) tensor_->wait(tensor_->all_reduce(full.narrow(0, a, b - a)));
  }
  if (x.direct) {
    if (replicate_.size() > 1) {
      x.reduce_req = replicate_.all_reduce(x.grad);
      x.reduce_pending = true;
    }
    return;
  }
  Tensor send = x.full_grad->t.narrow(0, 0, x.padded);
  if (opt_.reduce_dtype != opt_.compute_dtype) {
    x.reduce_send = pool_.acquire(opt_.reduce_dtype, gradients());
    const Tensor converted = x.reduce_send->t.narrow(0, 0, x.padded);
    cast(send, converted);
    send = converted;
  }
  x.reduce_req = x.comm->reduce_scatter(send, opt_.reduce_dtype == DType::F32 ? x.grad : x.reduce_recv);
  x.reduce_pending = true;
}

void FsdpEngine::complete_reduce(int unit) {
  Unit& x = units_[unit];
  if (!x.reduce_pending) return;
  if (x.direct) {
    replicate_.wait(x.reduce_req);
    x.reduce_pending = false;
    return;
  }
  x.comm->wait(x.reduce_req);
  x.reduce_pending = false;
  const Tensor& shard = opt_.reduce_dtype == DType::F32 ? x.grad : x.reduce_recv;
  if (replicate_.size() > 1) replicate_.wait(replicate_.all_reduce(shard));  // HYBRID_SHARD(_ZERO2), NO_SHARD
  if (opt_.reduce_dtype != DType::F32) cast(x.reduce_recv, x.grad);
  pool_.release(x.reduce_send);
  pool_.release(x.full_grad);
}

void FsdpEngine::finish() {
  std::fill(forward_uses_.begin(), forward_uses_.end(), 0);
  std::fill(backward_uses_.begin(), backward_uses_.end(), 0);
  for (Unit& x : units_) x.skips_backward = false;
  for (int u = num_units() - 1; u >= 0; --u) complete_reduce(u);
  for (int u = 0; u < num_units(); ++u) {
    Unit& x = units_[u];
    if (x.gather_pending) wait_gather(u);  // a prefetch nobody used (forward-only pass)
    pool_.release(x.full);
  }
  frozen_.finish();
}

// ---------------------------------------------------------------- optimizer

double FsdpEngine::grad_norm() {
  FSDP_NVTX_RANGE("grad norm");
  double sq = 0;
  if (tensor_ == nullptr || tensor_->rank() == 0) {
    sq = sum_squares(grad_flat_);
  } else {
    // Every tensor rank holds the whole slots: only tensor rank 0 counts them.
    for (const Unit& x : units_)
      for (const auto& [a, b] : x.split_runs_in_shard) sq += sum_squares(x.grad.narrow(0, a, b - a));
  }
  // Replicas hold identical shards, so the shard group alone covers every element once;
  // the tensor group then adds the other slices.
  fill_(norm_buf_, sq);
  shard_.wait(shard_.all_reduce(norm_buf_));
  if (tensor_ != nullptr) tensor_->wait(tensor_->all_reduce(norm_buf_));
  const Tensor total = norm_buf_.device().is_cpu() ? norm_buf_ : norm_buf_.to(Device::cpu());
  return std::sqrt(total.data<double>()[0]);
}

void FsdpEngine::optimizer_step(const optim::AdamWConfig& cfg, double lr, int64_t step, double grad_scale) {
  FSDP_NVTX_RANGE("optimizer step (AdamW on the shards)");
  for (Unit& x : units_) {
    x.shard_cast_stale = true;
    if (x.numel == 0) continue;
    optim::adamw_step_range(x.segments, x.shard_range.begin, x.master, x.grad, x.exp_avg, x.exp_avg_sq, cfg, lr, step,
                            grad_scale);
  }
}

Tensor FsdpEngine::gather_full(int unit) {
  Unit& x = units_[unit];
  if (x.numel == 0) return Tensor::empty({0}, DType::F32, opt_.device);
  Tensor full = Tensor::empty({x.padded}, DType::F32, opt_.device);
  x.comm->wait(x.comm->all_gather(x.master, full));
  return full.narrow(0, 0, x.numel);
}

}  // namespace fsdp
