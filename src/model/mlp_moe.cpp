// Mixtral's sparse MoE MLP over the op set; see mlp_moe.h for the math.
#include "fsdp/model/mlp_moe.h"

#include "fsdp/core/error.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif
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

}  // namespace

MoeMlp::MoeMlp(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp, RouterBiasRef bias)
    : MlpSublayer(cfg),
      sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      hidden_(cfg.hidden_size),
      ffn_(cfg.local_intermediate()),
      experts_(cfg.num_experts),
      k_(cfg.experts_per_token),
      eps_(cfg.norm_eps),
      norm_(block, block.name + ".mlp_norm"),
      router_(block, {block.name + ".router"}),
      bias_(std::move(bias)) {
  for (int64_t e = 0; e < experts_; ++e) {
    gate_up_.emplace_back(block, std::initializer_list<std::string>{expert_slot(block, e, "w1"),
                                                                    expert_slot(block, e, "w3")});
    down_.emplace_back(block, std::initializer_list<std::string>{expert_slot(block, e, "w2")});
  }
}

// Under tensor parallelism h and rstd are this rank's rows, F this rank's columns of every
// expert; the routing covers every rank's rows (Note [Experts under tensor parallelism]).
void MoeMlpSaved::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t C = c.hidden_size, F = c.local_intermediate(), E = c.num_experts, k = c.experts_per_token, NK = N * k;
  const int64_t rows = N / c.tensor_parallel;
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
  b(gu, {"moe experts' gate|up", {NK, 2 * F}, dt, K::Expensive});
  b(act, {"moe experts' act", {NK, F}, dt, K::Cheap});
  b(ys, {"moe experts' outputs", {NK, C}, dt, K::Expensive});
  b(record.prob_sum, {"moe router prob_sum", {E}, st, K::Statistic});
  b(record.lse_sq_sum, {"moe router lse_sq_sum", {1}, st, K::Statistic});
}

void MoeMlpGrads::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t C = c.hidden_size, F = c.local_intermediate(), E = c.num_experts, k = c.experts_per_token, NK = N * k;
  b(dys, {"moe dys", {NK, C}, dt, SavedKind::Cheap});
  b(dact, {"moe dact", {NK, F}, dt, SavedKind::Cheap});
  b(dgu, {"moe dgate|up", {NK, 2 * F}, dt, SavedKind::Cheap});
  b(dxs, {"moe dxs", {NK, C}, dt, SavedKind::Cheap});
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

// Each expert's SwiGLU over its contiguous group of rows; an expert no token chose is
// skipped (its weights get no gradient from this micro-batch, as in transformers).
void MoeMlp::experts_forward(const MoeMlpSaved& s, const UnitParams& p) const {
  const int64_t F = ffn_;
  for (int64_t e = 0; e < experts_; ++e) {
    const int64_t begin = s.group_begin[size_t(e)], rows = s.group_begin[size_t(e) + 1] - begin;
    if (rows == 0) continue;
    const Tensor gu = s.gu.narrow(0, begin, rows), act = s.act.narrow(0, begin, rows);
    gate_up_[size_t(e)].forward(s.xs.narrow(0, begin, rows), p, gu, false, begin);
    swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), act);
    down_[size_t(e)].forward(act, p, s.ys.narrow(0, begin, rows), false, begin);
  }
}

// The layer's one wait for the device: the group sizes decide the GEMM shapes.
void MoeMlp::read_group_sizes(MoeMlpSaved& s, int64_t N) const {
  const int64_t NK = N * k_;
#if defined(FSDP_WITH_CUDA)
  // Page-locked, so reading the group sizes back is one wait for the stream and nothing more.
  if (!s.offsets.device().is_cpu() && !s.offsets_host.defined()) s.offsets_host = cuda::pinned_empty({experts_ + 1}, DType::I32);
#endif
  if (!s.offsets.device().is_cpu()) s.offsets_host.copy_(s.offsets);
  const Tensor& offsets = s.offsets.device().is_cpu() ? s.offsets : s.offsets_host;
  s.group_begin.assign(size_t(experts_) + 1, 0);
  s.record.count.assign(size_t(experts_), 0);
  for (int64_t e = 0; e <= experts_; ++e) s.group_begin[size_t(e)] = int64_t(offsets.get_flat(e));
  for (int64_t e = 0; e < experts_; ++e)
    s.record.count[size_t(e)] = s.group_begin[size_t(e) + 1] - s.group_begin[size_t(e)];
  s.record.tokens = N;
  FSDP_CHECK(s.group_begin[size_t(experts_)] == NK, "moe: the expert groups hold {} rows, expected {}",
             s.group_begin[size_t(experts_)], NK);
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
  read_group_sizes(s, N);
  moe_gather_rows(h_all, s.order.narrow(0, 0, NK), k_, s.xs.narrow(0, 0, NK));
  experts_forward(s, p);
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
void MoeMlp::recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const {
  auto& s = static_cast<MoeMlpSaved&>(saved);
  const int64_t rows = x.size(0), N = rows * sp_->size(), NK = N * k_;
  FSDP_CHECK(int64_t(s.group_begin.size()) == experts_ + 1 && s.record.tokens == N,
             "moe: recompute over {} rows without a matching forward", N);
  const Tensor h = s.h.narrow(0, 0, rows);
  rmsnorm_forward(x, norm_.value(p), h, s.rstd.narrow(0, 0, rows), eps_);
  moe_gather_rows(sp_->gather(h), s.order.narrow(0, 0, NK), k_, s.xs.narrow(0, 0, NK));
  experts_swiglu(s);
}

void MoeMlp::experts_swiglu(const MoeMlpSaved& s) const {
  const int64_t F = ffn_;
  for (int64_t e = 0; e < experts_; ++e) {
    const int64_t begin = s.group_begin[size_t(e)], rows = s.group_begin[size_t(e) + 1] - begin;
    if (rows == 0) continue;
    const Tensor gu = s.gu.narrow(0, begin, rows);
    swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), s.act.narrow(0, begin, rows));
  }
}

void MoeMlp::experts_backward(const MoeMlpSaved& s, const UnitParams& p, MoeMlpGrads& g) const {
  const int64_t F = ffn_;
  for (int64_t e = 0; e < experts_; ++e) {
    const int64_t begin = s.group_begin[size_t(e)], rows = s.group_begin[size_t(e) + 1] - begin;
    if (rows == 0) continue;
    const Tensor gu = s.gu.narrow(0, begin, rows), dgu = g.dgu.narrow(0, begin, rows);
    const Tensor dact = g.dact.narrow(0, begin, rows);
    down_[size_t(e)].backward(g.dys.narrow(0, begin, rows), s.act.narrow(0, begin, rows), p, dact, begin);
    swiglu_backward(dact, gu.narrow(1, 0, F), gu.narrow(1, F, F), dgu.narrow(1, 0, F), dgu.narrow(1, F, F));
    gate_up_[size_t(e)].backward(dgu, s.xs.narrow(0, begin, rows), p, g.dxs.narrow(0, begin, rows), begin);
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
  experts_backward(s, p, g);
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
