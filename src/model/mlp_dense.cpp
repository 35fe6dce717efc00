// Llama's dense SwiGLU MLP over the op set; see mlp_dense.h for the math.
#include "fsdp/model/mlp_dense.h"

#include "fsdp/ops/elementwise.h"
#include "fsdp/ops/rmsnorm.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::model {

DenseSwiGLU::DenseSwiGLU(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp)
    : MlpSublayer(cfg),
      sp_(sp != nullptr ? sp : &kNoSequenceParallel),
      hidden_(cfg.hidden_size),
      ffn_(cfg.local_intermediate()),
      eps_(cfg.norm_eps),
      norm_(block, block.name + ".mlp_norm"),
      gate_up_(block, {block.name + ".w_gate", block.name + ".w_up"}),
      down_(block, {block.name + ".w_down"}) {}

// Under tensor parallelism the norm's rows are this rank's N / T and gate|up, act this
// rank's F / T columns over all N rows (Note [Sequence parallelism]).
void DenseMlpSaved::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t C = c.hidden_size, F = c.local_intermediate(), rows = N / c.tensor_parallel;
  b(h2, {"mlp h2", {rows, C}, dt, SavedKind::Cheap});
  b(rstd2, {"mlp rstd2", {rows}, stat_dtype(dt), SavedKind::Cheap});
  b(gu, {"mlp gate|up", {N, 2 * F}, dt, SavedKind::Expensive});
  b(act, {"mlp act", {N, F}, dt, SavedKind::Cheap});
}

void DenseMlpGrads::bind(const LlamaConfig& c, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t F = c.local_intermediate();
  b(dgu, {"mlp dgate|up", {N, 2 * F}, dt, SavedKind::Cheap});
  b(dact, {"mlp dact", {N, F}, dt, SavedKind::Cheap});
}

void DenseSwiGLU::forward(const Tensor& x, const UnitParams& p, MlpSaved& saved, const Tensor& out) const {
  auto& s = static_cast<DenseMlpSaved&>(saved);
  // x holds this rank's rows; the GEMMs run on every rank's (N of them).
  const int64_t rows = x.size(0), N = rows * sp_->size(), F = ffn_;
  const Tensor h = s.h2.narrow(0, 0, rows), gu = s.gu.narrow(0, 0, N), act = s.act.narrow(0, 0, N);
  rmsnorm_forward(x, norm_.value(p), h, s.rstd2.narrow(0, 0, rows), eps_);
  gate_up_.forward(sp_->gather(h), p, gu);  // column-parallel
  swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), act);
  sp_->scatter(down_, act, p, x, out);  // out = x + act @ Wdown^T (row-parallel)
}

void DenseSwiGLU::recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const {
  auto& s = static_cast<DenseMlpSaved&>(saved);
  const int64_t rows = x.size(0), N = rows * sp_->size(), F = ffn_;
  const Tensor gu = s.gu.narrow(0, 0, N);
  rmsnorm_forward(x, norm_.value(p), s.h2.narrow(0, 0, rows), s.rstd2.narrow(0, 0, rows), eps_);
  swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), s.act.narrow(0, 0, N));
}

void DenseSwiGLU::backward(const Tensor& x, const MlpSaved& saved, const UnitParams& p, const Tensor& dres,
                           const Tensor& dh, MlpGrads& grads_scratch) const {
  const auto& s = static_cast<const DenseMlpSaved&>(saved);
  auto& g = static_cast<DenseMlpGrads&>(grads_scratch);
  const int64_t F = ffn_;
  down_.backward(sp_->scatter_backward(dres), s.act, p, g.dact);  // d(out) on every rank's rows
  swiglu_backward(g.dact, s.gu.narrow(1, 0, F), s.gu.narrow(1, F, F), g.dgu.narrow(1, 0, F), g.dgu.narrow(1, F, F));
  const Tensor dh_all = sp_->partial_for(dh);
  gate_up_.backward(g.dgu, sp_->gather(s.h2), p, dh_all);  // h2 gathered again: Note [Sequence parallelism]
  sp_->gather_backward(dh_all, dh);
  rmsnorm_backward(dh, x, norm_.value(p), s.rstd2, dres, norm_.grad(p), /*accumulate_dx=*/true);
}

}  // namespace fsdp::model
