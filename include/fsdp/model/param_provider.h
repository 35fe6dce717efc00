// The model's one question to whoever holds its parameters: "give me unit u now". The
// decoder asks for each unit's flat buffer right before it runs that unit and says when it
// is done, which is exactly where FSDP gathers, frees and reduce-scatters. The
// single-process case (LocalParams) hands out buffers it owns; the FSDP engine gathers
// shards before and releases / reduce-scatters after. See param_units.h for the layout of
// a flat buffer.
#pragma once

#include "fsdp/core/tensor.h"

namespace fsdp::model {

// Supplies the flat parameter (and gradient) buffers of each unit, on the model's device
// in its compute dtype.
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  virtual Tensor params(int unit) = 0;  // [unit numel], valid between before_* and after_*
  virtual Tensor grads(int unit) = 0;   // [unit numel], gradients are accumulated (+=) into it
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
  // End of a forward (or forward + backward) pass: nothing may stay in flight.
  virtual void finish() {}
};

}  // namespace fsdp::model
