// One unit's tensors as a sublayer's forward or backward sees them, and a handle on one
// of its parameters wherever that lives (see param_units.h for the two buffers).
#pragma once

#include <string>

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

struct LinearScratch;  // linear.h

struct UnitParams {
  Tensor params;  // the trainable flat buffer in the compute dtype (may hold 0 elements)
  Tensor frozen;  // the frozen bytes (uint8); undefined when nothing is frozen
  Tensor grads;   // params' gradient buffer (backward only; undefined in forward passes)
  LinearScratch* scratch = nullptr;  // LoRA and NF4 work space; null when neither is used
  // Expert parallelism: the block's expert unit's trainable buffer and its gradient
  // (param_units.h, UnitLayout::experts_of), and its frozen bytes (LoRA); undefined otherwise.
  Tensor expert_params, expert_grads, expert_frozen;
};

// A dense parameter of a unit (a norm weight, the embedding table): a view of the
// trainable buffer, or of the frozen bytes when LoRA froze it, in the compute dtype.
class ParamRef {
 public:
  ParamRef() = default;
  ParamRef(const UnitLayout& unit, const std::string& name);

  Tensor value(const UnitParams& p) const;
  // Its gradient, or an undefined tensor when it is frozen (nothing computes one).
  Tensor grad(const UnitParams& p) const;
  bool frozen() const { return frozen_; }

 private:
  Dims shape_;
  bool frozen_ = false;
  int64_t offset_ = 0;  // elements into params, or bytes into frozen
  DType dtype_ = DType::F32;
};

}  // namespace fsdp::model
