// The dense SwiGLU MLP of Llama, an MlpSublayer (mlp.h):
//
//   h2 = rmsnorm(x) ; g|u = Linear_gate_up(h2) ; act = silu(g) * u
//   out = x + Linear_down(act)
//
// gate and up are one fused Linear over the adjacent slots w_gate|w_up ([2F, C]), so one
// GEMM produces both halves.
#pragma once

#include "fsdp/model/linear.h"
#include "fsdp/model/mlp.h"
#include "fsdp/model/sequence_parallel.h"

namespace fsdp::model {

struct DenseMlpSaved final : MlpSaved {
  Tensor h2;     // [N, C]   rmsnorm(x)                  Cheap
  Tensor rstd2;  // [N]      its 1/rms (stat dtype)      Cheap
  Tensor gu;     // [N, 2F]  gate | up                   Expensive
  Tensor act;    // [N, F]   silu(gate) * up             Cheap

  void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) override;
};

struct DenseMlpGrads final : MlpGrads {
  Tensor dgu;   // [N, 2F]
  Tensor dact;  // [N, F]

  void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind) override;
};

class DenseSwiGLU final : public MlpSublayer {
 public:
  // Resolves mlp_norm, w_gate|w_up and w_down in a block's unit layout; `sp` as for the
  // attention sublayer (gate|up column-parallel, down row-parallel).
  DenseSwiGLU(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp = nullptr);

  void forward(const Tensor& x, const UnitParams& p, MlpSaved& saved, const Tensor& out) const override;
  void recompute_cheap(const Tensor& x, const UnitParams& p, MlpSaved& saved) const override;
  void backward(const Tensor& x, const MlpSaved& saved, const UnitParams& p, const Tensor& dres, const Tensor& dh,
                MlpGrads& g) const override;

 private:
  const SequenceParallel* sp_;
  int64_t hidden_ = 0, ffn_ = 0;  // C, F (this tensor rank's F / T)
  double eps_ = 0;
  ParamRef norm_;                 // mlp_norm
  Linear gate_up_, down_;
};

}  // namespace fsdp::model
