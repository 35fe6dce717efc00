// Linear: the one path every weight matrix of the model goes through, y = x W^T.
//
//   forward:   y = x W^T            (or y += x W^T: a residual add folded into the GEMM's beta)
//   backward:  dW += dy^T x         (into the unit's gradient buffer; not for a frozen W)
//              dx  = dy W
//
// W is [out, in] (Hugging Face's layout), a slice of a unit's buffer at a fixed offset; a
// fused projection (q|k|v, gate|up) is one Linear over slots that param_units.cpp lays out
// next to each other, so the fused GEMM needs no copy. The weights arrive with each call
// (the unit's buffers, as FSDP gathered them), so one Linear serves every micro-batch and
// every gather. Where W lives decides the path:
//   trainable    a view of the trainable flat buffer; its gradient is accumulated
//   frozen       a view of the frozen bytes in the compute dtype (LoRA's base); no dW
//   frozen NF4   each fused part dequantized (fsdp/ops/nf4.h) into the scratch right
//                before the GEMM, in forward and again in backward; no dW
// and each fused part whose weight LoRA targets adds its adapter (lora_adapter.h) on its
// columns of y (forward) and into dx (backward). The sublayers call only forward and
// backward.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/lora_adapter.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

class Linear {
 public:
  Linear() = default;
  // The slots `slots` of `unit` (our names, e.g. {"layers.0.wq", "layers.0.wk", "layers.0.wv"}),
  // which must be adjacent in that order, share their input width, and be all trainable or
  // all frozen: their rows stacked make the weight. Errors name the unit and the slot.
  Linear(const UnitLayout& unit, std::initializer_list<std::string> slots);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  // y = x W^T (+ adapters), or y += ... with accumulate. x: [N, in], y: [N, out]. rows
  // numbers x's rows in the pass (the adapters' dropout masks are drawn per row): the first
  // row's number (an expert's group of rows starts at its offset), or runs of numbers.
  void forward(const Tensor& x, const UnitParams& p, const Tensor& y, bool accumulate = false,
               DropoutRows rows = 0) const;
  // dW += dy^T x when W trains, the adapters' gradients when there are any, and
  // dx = dy W (+ the adapters' share). dy: [N, out], x: the forward's input.
  void backward(const Tensor& dy, const Tensor& x, const UnitParams& p, const Tensor& dx, DropoutRows rows = 0) const;

 private:
  enum class Source : uint8_t { Trainable, Frozen, FrozenNf4 };
  struct Part {
    int64_t row = 0, rows = 0;           // its rows of the fused W (its columns of y)
    FrozenSlot nf4;                      // its NF4 pieces (FrozenNf4 only)
    std::optional<LoraAdapter> adapter;  // when LoRA targets it
  };
  // W as [out, in] in the compute dtype: a view, or the dequantized scratch.
  Tensor weight(const UnitParams& p) const;

  Source source_ = Source::Trainable;
  int64_t offset_ = 0;  // elements into params (Trainable) or bytes into frozen (Frozen)
  DType frozen_dtype_ = DType::F32;
  int64_t out_ = 0, in_ = 0;
  std::vector<Part> parts_;
};

}  // namespace fsdp::model
