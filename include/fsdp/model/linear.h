// Linear: the one path every weight matrix of the model goes through, y = x W^T.
//
//   forward:   y = x W^T            (or y += x W^T: a residual add folded into the GEMM's beta)
//   backward:  dW += dy^T x         (into the unit's gradient buffer)
//              dx  = dy W
//
// W is [out, in] (Hugging Face's layout), a slice of a unit's flat buffer at a fixed
// offset; a fused projection (q|k|v, gate|up) is one Linear over slots that param_units.cpp
// lays out next to each other, so the fused GEMM needs no copy. The weight arrives with
// each call (the unit's flat parameters and gradients, as FSDP gathered them), so one
// Linear serves every micro-batch and every gather.
//
// This is the place where a LoRA adapter (y += s * (x A^T) B^T, trainable A, B beside a
// frozen W) or an NF4-quantized frozen weight (dequantized into the compute dtype right
// before the GEMM, with no dW) is added: the sublayers call only forward and backward.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

class Linear {
 public:
  Linear() = default;
  // The slots `slots` of `unit` (our names, e.g. {"layers.0.wq", "layers.0.wk", "layers.0.wv"}),
  // which must be adjacent in that order and share their input width: their rows stacked
  // make the weight. Errors name the unit and the slot that breaks the adjacency.
  Linear(const UnitLayout& unit, std::initializer_list<std::string> slots);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // The [out, in] weight inside a unit's flat buffer (its parameters or its gradients).
  Tensor weight(const Tensor& flat) const;

  // y = x W^T, or y += x W^T with accumulate. x: [N, in], y: [N, out].
  void forward(const Tensor& x, const Tensor& params, const Tensor& y, bool accumulate = false) const;
  // dW += dy^T x into `grads`' slice, then dx = dy W. dy: [N, out], x: the forward's input.
  void backward(const Tensor& dy, const Tensor& x, const Tensor& params, const Tensor& grads, const Tensor& dx) const;

 private:
  int64_t offset_ = 0, out_ = 0, in_ = 0;
};

}  // namespace fsdp::model
