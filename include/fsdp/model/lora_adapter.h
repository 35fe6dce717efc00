// One LoRA adapter beside a frozen weight W [out, in] (PEFT's lora.Linear, model/peft.h):
//
//   forward:   u = d(x) A^T                 [N, r]     d = dropout (training) or identity
//              y += s * u B^T               [N, out]   (s folded into the GEMM's alpha)
//   backward:  u = d(x) A^T                 recomputed: nothing is saved between the two
//              dB += s * dy^T u             [out, r]
//              du = s * dy B                [N, r]
//              dA += du^T d(x)              [r, in]
//              dx += d'(du A)               (d' applies the same mask and scale)
//
// The dropout mask of element (i, j) is drawn from (the run's dropout key, this adapter, the
// row's global number scratch.first_row + row0 + i, the column's global number: j, or j plus
// the slice's first column on a row-parallel base under tensor parallelism),
// fsdp/ops/dropout.h, so the backward and an activation-checkpointing recompute see the
// mask the forward saw without storing it. An expert's input under expert parallelism holds
// rows of several ranks' micro-batches: its rows are numbered run by run (DropoutRows), each
// run as its source rank numbers it (Note [LoRA on expert-parallel experts] in mlp_moe.h).
// The scratch tensors are shared by every adapter of the model (they run one at a time),
// sized once by make_linear_scratch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

// Work space of Linear's LoRA and NF4 paths (fields undefined when unused), and the
// dropout state of the current pass.
struct LinearScratch {
  Tensor weight;  // [largest NF4 Linear's out * in]: a dequantized weight, compute dtype
  Tensor xd, dxd;  // [rows * largest in]: an adapter's dropped-out input and its gradient
  Tensor u, du;    // [rows * r]
  int64_t rows = 0;
  // On in training passes (forward_backward), off in evaluation (dropout is the identity).
  bool training = false;
  uint64_t dropout_key = 0;  // the run's (seed, purpose) key
  int64_t first_row = 0;     // the global number of the pass's row 0 (its first sample x T)
};

// Scratch for Linears of `units` over up to `rows` rows, in `dtype` on `device`; the
// largest NF4 weight counts whole fused Linears (q|k|v, gate|up, w1|w3).
LinearScratch make_linear_scratch(const std::vector<UnitLayout>& units, int64_t rows, DType dtype, Device device);
// The bytes make_linear_scratch allocates, in double and without allocating (the memory
// plan's "LoRA and NF4 scratch").
double linear_scratch_bytes(const std::vector<UnitLayout>& units, double rows, DType dtype);

// A run of an adapter input's consecutive rows whose dropout numbers are consecutive too:
// `rows` rows, the first numbered scratch.first_row + row0.
struct RowRun {
  int64_t rows = 0, row0 = 0;
};

// How an adapter input's rows are numbered for dropout: from row0 on (every Linear but an
// expert's under expert parallelism), or run by run (`runs`, which cover the input's rows
// in order and outlive the call).
struct DropoutRows {
  DropoutRows(int64_t first = 0) : row0(first) {}  // NOLINT(google-explicit-constructor): the usual case
  explicit DropoutRows(const std::vector<RowRun>* by_run) : runs(by_run) {}
  int64_t row0 = 0;
  const std::vector<RowRun>* runs = nullptr;
};

class LoraAdapter {
 public:
  // The adapter of `base` (slots "<base>.lora_A", "<base>.lora_B" of `unit`).
  LoraAdapter(const UnitLayout& unit, const std::string& base);

  // y (the base's columns of the output, [N, out]) += s * d(x) A^T B^T.
  void forward(const Tensor& x, const UnitParams& p, const Tensor& y, DropoutRows rows) const;
  // dA, dB accumulated into p.grads; dx (the Linear's input gradient, [N, in]) += the
  // adapter's share. dy: [N, out], this adapter's columns of the output gradient.
  void backward(const Tensor& dy, const Tensor& x, const UnitParams& p, const Tensor& dx, DropoutRows rows) const;

 private:
  struct Pair {
    Tensor A, B;
  };
  Pair pair(const Tensor& flat) const;
  LinearScratch& scratch(const UnitParams& p, int64_t rows) const;
  // x, or d(x) written into the scratch.
  Tensor adapter_input(const Tensor& x, LinearScratch& s, DropoutRows rows) const;
  // dx (+)= d'(dxd), the dropout's backward over the same runs.
  void dropout_input_grad(const Tensor& dxd, const Tensor& dx, LinearScratch& s, DropoutRows rows) const;

  int64_t a_ = 0, b_ = 0;  // offsets of lora_A [r, in] and lora_B [out, r] in the trainable buffer
  int64_t rank_ = 0, in_ = 0, out_ = 0;
  double scale_ = 0, dropout_ = 0;
  uint64_t stream_ = 0;  // this adapter's dropout stream (from its name)
  int64_t col0_ = 0;     // the global number of the input's column 0 (tensor parallelism)
};

}  // namespace fsdp::model
