// Mixtral's sparse MoE MLP over the op set; see mlp_moe.h for the math.
#include "fsdp/model/mlp_moe.h"

#include "fsdp/core/error.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif
#include "fsdp/model/moe_capacity.h"
#include "fsdp/ops/elementwise.h"
#include "fsdp/ops/moe_permute.h"
#include "fsdp/ops/moe_router.h"
#include "fsdp/ops/rmsnorm.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::model {

namespace {

std::string expert_slot(const UnitLayout& block, int64_t e, const char* w) {
  return block.name + ".experts." + std::to_string(e) + "." + w;
}

// Note [LoRA on expert-parallel experts]: each local expert's received rows (expert-major,
// each expert's rows source by source) numbered for dropout as their source rank numbers
// them: source i's block is its sorted pairs [block_source, + block_rows), and source i's
// micro-batch starts (i - rank) x N rows from this rank's (consecutive data-parallel ranks).
std::vector<std::vector<RowRun>> received_row_runs(const DispatchLayout& d, int rank, int ranks, int64_t tokens) {
  const size_t nl = d.expert_begin.size() - 1;
  std::vector<std::vector<RowRun>> runs(nl);
  for (size_t e = 0; e < nl; ++e)
    for (int i = 0; i < ranks; ++i) {
      const size_t b = size_t(i) * nl + e;
      runs[e].push_back(RowRun{d.block_rows[b], int64_t(i - rank) * tokens + d.block_source[b]});
    }
  return runs;
}

}  // namespace

MoeMlp::MoeMlp(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp, RouterBiasRef bias,
               const ExpertDispatch* ep, const UnitLayout* experts)
    : MlpSublayer(cfg),
      sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      ep_(ep != nullptr && ep->on() ? ep : nullptr),
      hidden_(cfg.hidden_size),
      ffn_(cfg.local_intermediate()),
      experts_(cfg.num_experts),
      k_(cfg.experts_per_token),
      eps_(cfg.norm_eps),
      norm_(block, block.name + ".mlp_norm"),
      router_(block, {block.name + ".router"}),
      bias_(std::move(bias)) {
  FSDP_CHECK(ep_ == nullptr || experts != nullptr, "{}: expert parallelism without the block's expert unit",
             block.name);
  const UnitLayout& holder = ep_ != nullptr ? *experts : block;
  const int64_t first = ep_ != nullptr ? ep_->first_expert() : 0, count = ep_ != nullptr ? ep_->local_experts() : experts_;
  for (int64_t e = first; e < first + count; ++e) {
    gate_up_.emplace_back(holder, std::initializer_list<std::string>{expert_slot(block, e, "w1"),
                                                                     expert_slot(block, e, "w3")});
    down_.emplace_back(holder, std::initializer_list<std::string>{expert_slot(block, e, "w2")});
  }
}

UnitParams MoeMlp::expert_params(const UnitParams& p) const {
  if (ep_ == nullptr) return p;
  return UnitParams{p.expert_params, p.expert_frozen, p.expert_grads, p.scratch, Tensor(), Tensor(), Tensor()};
}

// Under tensor parallelism h and rstd are this rank's rows, F this rank's columns of every
// expert; the routing covers every rank's rows (Note [Experts under tensor parallelism]).
void MoeMlpSaved::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t C = c.hidden_size, F = c.local_intermediate(), E = c.num_experts, k = c.experts_per_token, NK = N * k;
  const int64_t rows = N / c.tensor_parallel;
  const int64_t R = max_received_rows(c, N);  // the expert side's rows: N k without expert parallelism
  const DType st = stat_dtype(dt);
  using K = SavedKind;
  b(h, {"moe h", {rows, C}, dt, K::Cheap});
  b(rstd, {"moe rstd", {rows}, st, K::Cheap});
  b(logits, {"moe router logits", {N, E}, dt, K::Expensive});
  b(probs, {"moe router probs", {N, E}, st, K::Expensive});
  b(lse, {"moe router lse", {N}, st, K::Expensive});
  b(expert, {"moe expert ids", {N, k}, DType::I32, K::Expensive});
  b(weight, {"moe expert weights", {N, k}, st, K::Expensive});
  b(count, {"moe group sizes", {E}, DType::I32, K::Expensive});
  b(order, {"moe order", {NK}, DType::I32, K::Expensive});
  b(slot, {"moe slot", {NK}, DType::I32, K::Expensive});
  b(offsets, {"moe group offsets", {E + 1}, DType::I32, K::Expensive});
  b(xs, {"moe gathered rows", {NK, C}, dt, K::Cheap});
  b(gu, {"moe experts' gate|up", {R, 2 * F}, dt, K::Expensive});
  b(act, {"moe experts' act", {R, F}, dt, K::Cheap});
  b(ys, {"moe experts' outputs", {NK, C}, dt, K::Expensive});
  if (c.expert_units()) b(xr, {"moe received rows", {R, C}, dt, K::Cheap});
  b(record.prob_sum, {"moe router prob_sum", {E}, st, K::Statistic});
  b(record.lse_sq_sum, {"moe router lse_sq_sum", {1}, st, K::Statistic});
}

void MoeMlpGrads::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t C = c.hidden_size, F = c.local_intermediate(), E = c.num_experts, k = c.experts_per_token, NK = N * k;
  const int64_t R = max_received_rows(c, N);
  b(dys, {"moe dys", {NK, C}, dt, SavedKind::Cheap});
  b(dact, {"moe dact", {R, F}, dt, SavedKind::Cheap});
  b(dgu, {"moe dgate|up", {R, 2 * F}, dt, SavedKind::Cheap});
  b(dxs, {"moe dxs", {NK, C}, dt, SavedKind::Cheap});
  if (c.expert_units()) b(dxr, {"moe received dxs", {R, C}, dt, SavedKind::Cheap});
  b(dweight, {"moe dweight", {N, k}, stat_dtype(dt), SavedKind::Cheap});
  b(dlogits, {"moe dlogits", {N, E}, dt, SavedKind::Cheap});
  b(router_loss.aux_grad, {"moe router aux_grad", {E}, stat_dtype(dt), SavedKind::Cheap});
  if (router_loss.aux_grad.defined()) router_loss.aux_grad.zero_();
}

// Softmax, top-k, the routing statistics and the sort by expert, for the first N rows.
void MoeMlp::route(const MoeMlpSaved& s, int64_t N) const {
  const int64_t NK = N * k_;
  const Tensor expert = s.expert.narrow(0, 0, N), probs = s.probs.narrow(0, 0, N), lse = s.lse.narrow(0, 0, N);
  moe_router_forward(s.logits.narrow(0, 0, N), k_, probs, lse, expert, s.weight.narrow(0, 0, N), bias_.get());
  moe_router_stats(probs, expert, lse, s.record.prob_sum, s.count, s.record.lse_sq_sum);
  moe_permute_plan(expert, experts_, s.order.narrow(0, 0, NK), s.slot.narrow(0, 0, NK), s.offsets);
}

// Each local expert's SwiGLU over its contiguous run of rows; an expert no token chose is
// skipped (its weights get no gradient from this micro-batch, as in transformers).
void MoeMlp::experts_forward(const std::vector<int64_t>& at, const Tensor& in, const MoeMlpSaved& s,
                             const Tensor& out, const UnitParams& p, const ExpertRowRuns* runs) const {
  const int64_t F = ffn_;
  for (size_t e = 0; e < gate_up_.size(); ++e) {
    const int64_t begin = at[e], rows = at[e + 1] - begin;
    if (rows == 0) continue;
    const DropoutRows numbers = runs != nullptr ? DropoutRows(&(*runs)[e]) : DropoutRows(begin);
    const Tensor gu = s.gu.narrow(0, begin, rows), act = s.act.narrow(0, begin, rows);
    gate_up_[e].forward(in.narrow(0, begin, rows), p, gu, false, numbers);
    swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), act);
    down_[e].forward(act, p, out.narrow(0, begin, rows), false, numbers);
  }
}

// The layer's one wait for the device (routing_to_host, below): the group sizes decide the
// GEMM shapes.
void MoeMlp::read_group_sizes(MoeMlpSaved& s, int64_t N) const {
#if defined(FSDP_WITH_CUDA)
  // Page-locked, so reading the group sizes back is one wait for the stream and nothing more.
  if (!s.offsets.device().is_cpu() && !s.offsets_host.defined()) s.offsets_host = cuda::pinned_empty({experts_ + 1}, DType::I32);
#endif
  if (!s.offsets.device().is_cpu()) s.offsets_host.copy_(s.offsets);
  const Tensor& offsets = s.offsets.device().is_cpu() ? s.offsets : s.offsets_host;
  s.group_begin.assign(size_t(experts_) + 1, 0);
  for (int64_t e = 0; e <= experts_; ++e) s.group_begin[size_t(e)] = int64_t(offsets.get_flat(e));
  record_group_sizes(s, N);
}

// The routing's counts (the expert load, before any drop) from the group sizes just read.
void MoeMlp::record_group_sizes(MoeMlpSaved& s, int64_t N) const {
  const int64_t NK = N * k_;
  s.record.count.assign(size_t(experts_), 0);
  for (int64_t e = 0; e < experts_; ++e)
    s.record.count[size_t(e)] = s.group_begin[size_t(e) + 1] - s.group_begin[size_t(e)];
  s.record.tokens = N;
  s.record.dropped = 0;
  FSDP_CHECK(s.group_begin[size_t(experts_)] == NK, "moe: the expert groups hold {} rows, expected {}",
             s.group_begin[size_t(experts_)], NK);
}

// Note [Expert capacity]: the counts above stay the routing's (the router losses and the
// expert load are the routing's, before any drop); the groups shrink to the kept pairs.
void MoeMlp::apply_capacity(MoeMlpSaved& s, int64_t N) const {
  const int64_t capacity = expert_capacity(cfg_, N), NK = N * k_;
  if (capacity == 0) return;
  s.record.dropped = drop_over_capacity(s.probs.narrow(0, 0, N), s.expert.narrow(0, 0, N), capacity,
                                        s.order.narrow(0, 0, NK), s.slot.narrow(0, 0, NK), s.offsets);
  for (int64_t e = 0; e <= experts_; ++e) s.group_begin[size_t(e)] = int64_t(s.offsets.get_flat(e));
}

namespace {

// The kept pairs per expert, from the group offsets.
std::vector<int64_t> group_sizes(const std::vector<int64_t>& begin) {
  std::vector<int64_t> n(begin.size() - 1);
  for (size_t e = 0; e + 1 < begin.size(); ++e) n[e] = begin[e + 1] - begin[e];
  return n;
}

}  // namespace

// The layer's one wait for the device: the group sizes decide the GEMM shapes, and under
// expert parallelism the all-to-alls' counts. On a GPU under expert parallelism the counts
// are exchanged on the device first and the exchanged ones read back (Note [Expert counts
// on a GPU] in moe_dispatch.h); the drop (the CPU's only) is refused there at start-up.
void MoeMlp::routing_to_host(MoeMlpSaved& s, int64_t N) const {
  if (ep_ == nullptr || s.count.device().is_cpu()) {
    read_group_sizes(s, N);
    apply_capacity(s, N);
    if (ep_ != nullptr) s.layout = ep_->exchange(group_sizes(s.group_begin));
    return;
  }
  FSDP_CHECK(expert_capacity(cfg_, N) == 0, "moe: token dropping (moe.capacity_factor) runs on the host only");
  std::vector<int64_t> mine;
  s.layout = ep_->exchange(s.count, mine);
  s.group_begin.assign(size_t(experts_) + 1, 0);
  for (int64_t e = 0; e < experts_; ++e) s.group_begin[size_t(e) + 1] = s.group_begin[size_t(e)] + mine[size_t(e)];
  record_group_sizes(s, N);
}

void MoeMlp::forward(const Tensor& x, const UnitParams& p, MlpSaved& saved, const Tensor& out) const {
  auto& s = static_cast<MoeMlpSaved&>(saved);
  // x holds this rank's rows; the router and the experts run on every rank's (N of them).
  const int64_t rows = x.size(0), N = rows * sp_->size(), NK = N * k_;
  const Tensor h = s.h.narrow(0, 0, rows);
  rmsnorm_forward(x, norm_.value(p), h, s.rstd.narrow(0, 0, rows), eps_);
  const Tensor h_all = sp_->gather(h);
  router_.forward(h_all, p, s.logits.narrow(0, 0, N));
  route(s, N);
  routing_to_host(s, N);
  const int64_t kept = s.group_begin[size_t(experts_)];
  moe_gather_rows(h_all, s.order.narrow(0, 0, NK), k_, s.xs.narrow(0, 0, NK));
  if (ep_ == nullptr) {
    experts_forward(s.group_begin, s.xs, s, s.ys, p);
  } else {
    // Note [Expert-parallel dispatch]: the pairs to their experts' ranks, the experts, back
    // (the counts were exchanged with the group sizes: routing_to_host).
    ep_->dispatch(s.layout, s.xs.narrow(0, 0, kept), s.xr);
    const Tensor yr = ep_->grouped_scratch();  // the outputs only travel back: scratch
    const ExpertRowRuns runs = received_row_runs(s.layout, ep_->rank(), ep_->size(), N);
    experts_forward(s.layout.expert_begin, s.xr, s, yr, expert_params(p), &runs);
    ep_->combine(s.layout, yr, s.ys.narrow(0, 0, kept));
  }
  // Dropped pairs (Note [Expert capacity]) sit past the kept rows: their outputs are zero.
  if (kept < NK) fill_(s.ys.narrow(0, kept, NK - kept), 0.0);
  combine(s, x, out, N);
}

// out = x + sum_j w_j * y_j, each token's k outputs gathered in choice order; under tensor
// parallelism the y_j are partial sums, so is their combine, reduce-scattered to this
// rank's rows before x is added (Note [Experts under tensor parallelism]).
void MoeMlp::combine(const MoeMlpSaved& s, const Tensor& x, const Tensor& out, int64_t N) const {
  const int64_t NK = N * k_;
  const Tensor ys = s.ys.narrow(0, 0, NK), slot = s.slot.narrow(0, 0, NK), weight = s.weight.narrow(0, 0, N);
  if (!sp_->on()) {
    moe_combine(ys, slot, weight, x, out);
    return;
  }
  const Tensor partial = sp_->partial_for(x);
  moe_combine(ys, slot, weight, Tensor(), partial);
  sp_->scatter_sum(partial, x, out);
}

// Selective checkpointing: the routing and the experts' GEMM outputs were kept, so the
// norm, the gather and each expert's SwiGLU run again over the same groups (no host wait).
// Under expert parallelism the experts' inputs are dispatched again (one all-to-all, with
// the kept layout: no count exchange).
void MoeMlp::recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const {
  auto& s = static_cast<MoeMlpSaved&>(saved);
  const int64_t rows = x.size(0), N = rows * sp_->size(), NK = N * k_;
  FSDP_CHECK(int64_t(s.group_begin.size()) == experts_ + 1 && s.record.tokens == N,
             "moe: recompute over {} rows without a matching forward", N);
  const Tensor h = s.h.narrow(0, 0, rows);
  rmsnorm_forward(x, norm_.value(p), h, s.rstd.narrow(0, 0, rows), eps_);
  moe_gather_rows(sp_->gather(h), s.order.narrow(0, 0, NK), k_, s.xs.narrow(0, 0, NK));
  if (ep_ == nullptr) {
    experts_swiglu(s.group_begin, s);
    return;
  }
  ep_->dispatch(s.layout, s.xs.narrow(0, 0, s.group_begin[size_t(experts_)]), s.xr);
  experts_swiglu(s.layout.expert_begin, s);
}

void MoeMlp::experts_swiglu(const std::vector<int64_t>& at, const MoeMlpSaved& s) const {
  const int64_t F = ffn_;
  for (size_t e = 0; e < gate_up_.size(); ++e) {
    const int64_t begin = at[e], rows = at[e + 1] - begin;
    if (rows == 0) continue;
    const Tensor gu = s.gu.narrow(0, begin, rows);
    swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), s.act.narrow(0, begin, rows));
  }
}

// dy, in and dx: the experts' output gradients, inputs and input gradients over the runs.
void MoeMlp::experts_backward(const std::vector<int64_t>& at, const Tensor& dy, const Tensor& in,
                              const MoeMlpSaved& s, const UnitParams& p, MoeMlpGrads& g, const Tensor& dx,
                              const ExpertRowRuns* runs) const {
  const int64_t F = ffn_;
  for (size_t e = 0; e < gate_up_.size(); ++e) {
    const int64_t begin = at[e], rows = at[e + 1] - begin;
    if (rows == 0) continue;
    const DropoutRows numbers = runs != nullptr ? DropoutRows(&(*runs)[e]) : DropoutRows(begin);
    const Tensor gu = s.gu.narrow(0, begin, rows), dgu = g.dgu.narrow(0, begin, rows);
    const Tensor dact = g.dact.narrow(0, begin, rows);
    down_[e].backward(dy.narrow(0, begin, rows), s.act.narrow(0, begin, rows), p, dact, numbers);
    swiglu_backward(dact, gu.narrow(1, 0, F), gu.narrow(1, F, F), dgu.narrow(1, 0, F), dgu.narrow(1, F, F));
    gate_up_[e].backward(dgu, in.narrow(0, begin, rows), p, dx.narrow(0, begin, rows), numbers);
  }
}

void MoeMlp::backward(const Tensor& x, const MlpSaved& saved, const UnitParams& p, const Tensor& dres,
                      const Tensor& dh, MlpGrads& grads_scratch) const {
  const auto& s = static_cast<const MoeMlpSaved&>(saved);
  auto& g = static_cast<MoeMlpGrads&>(grads_scratch);
  const int64_t rows = x.size(0), N = rows * sp_->size(), NK = N * k_;
  FSDP_CHECK(int64_t(s.group_begin.size()) == experts_ + 1 && s.record.tokens == N,
             "moe: backward over {} rows without a matching forward", N);
  const Tensor slot = s.slot.narrow(0, 0, NK), weight = s.weight.narrow(0, 0, N);
  const Tensor dweight = g.dweight.narrow(0, 0, N), dlogits = g.dlogits.narrow(0, 0, N);
  // d(out) on every rank's rows; under tensor parallelism dweight = <d(out), ys> is partial.
  moe_combine_backward(sp_->scatter_backward(dres), s.ys.narrow(0, 0, NK), slot, weight, g.dys.narrow(0, 0, NK),
                       dweight);
  const int64_t kept = s.group_begin[size_t(experts_)];
  if (ep_ == nullptr) {
    experts_backward(s.group_begin, g.dys, s.xs, s, p, g, g.dxs);
  } else {
    // The gradient of the combine is a dispatch, and that of the dispatch a combine.
    const Tensor dyr = ep_->grouped_scratch();
    ep_->dispatch(s.layout, g.dys.narrow(0, 0, kept), dyr);
    const ExpertRowRuns runs = received_row_runs(s.layout, ep_->rank(), ep_->size(), N);
    experts_backward(s.layout.expert_begin, dyr, s.xr, s, expert_params(p), g, g.dxr, &runs);
    ep_->combine(s.layout, g.dxr, g.dxs.narrow(0, 0, kept));
  }
  // A dropped pair passes no gradient to its token's input (Note [Expert capacity]).
  if (kept < NK) fill_(g.dxs.narrow(0, kept, NK - kept), 0.0);
  moe_router_backward(dweight, s.probs.narrow(0, 0, N), s.lse.narrow(0, 0, N), s.expert.narrow(0, 0, N), weight,
                      g.router_loss.aux_grad, g.router_loss.z_scale, dlogits);
  // dh = dlogits W_router (+) the gathered expert inputs' gradients, over every rank's rows
  // (h gathered again, as the dense MLP does: Note [Sequence parallelism]), then summed
  // over the group into this rank's rows.
  const Tensor dh_all = sp_->partial_for(dh);
  router_.backward(dlogits, sp_->gather(s.h.narrow(0, 0, rows)), p, dh_all);
  moe_gather_rows_backward(g.dxs.narrow(0, 0, NK), slot, k_, dh_all, /*accumulate=*/true);
  sp_->gather_backward(dh_all, dh);
  rmsnorm_backward(dh, x, norm_.value(p), s.rstd.narrow(0, 0, rows), dres, norm_.grad(p), /*accumulate_dx=*/true);
}

}  // namespace fsdp::model
