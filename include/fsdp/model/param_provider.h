// The model's one question to whoever holds its parameters: "give me unit u now". The
// decoder asks for each unit's flat buffer right before it runs that unit and says when it
// is done, which is exactly where FSDP gathers, frees and reduce-scatters. The
// single-process case (LocalParams) hands out buffers it owns; the FSDP engine gathers
// shards before and releases / reduce-scatters after. See param_units.h for the layout of
// a flat buffer.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/model/unit_params.h"

namespace fsdp::model {

// Supplies the flat parameter (and gradient) buffers of each unit, on the model's device
// in its compute dtype.
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  virtual Tensor params(int unit) = 0;  // [unit numel], valid between before_* and after_*
  virtual Tensor grads(int unit) = 0;   // [unit numel], gradients are accumulated (+=) into it
  // The unit's frozen bytes (uint8 [frozen_bytes], param_units.h), valid like params();
  // undefined for a unit with nothing frozen.
  virtual Tensor frozen(int /*unit*/) { return Tensor(); }
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
  // Said before a backward pass: unit u's backward will not run in it (a frozen embedding
  // has nothing to compute), so nothing should be gathered for it.
  virtual void skip_backward(int /*unit*/) {}
  // End of a forward (or forward + backward) pass: nothing may stay in flight.
  virtual void finish() {}

  // Unit u's buffers as a sublayer takes them, for a forward pass (no gradients) or a
  // backward pass; `scratch` serves its LoRA adapters and NF4 weights.
  UnitParams forward_view(int unit, LinearScratch* scratch = nullptr) {
    return UnitParams{params(unit), frozen(unit), Tensor(), scratch, Tensor(), Tensor(), Tensor()};
  }
  UnitParams backward_view(int unit, LinearScratch* scratch = nullptr) {
    return UnitParams{params(unit), frozen(unit), grads(unit), scratch, Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace fsdp::model
