// The MLP sublayer of a transformer block, as an interface:
//
//   out = x + mlp(rmsnorm(x))
//
// with one implementation today, the dense SwiGLU of Llama (mlp_dense.h); a sparse
// mixture-of-experts MLP (Mixtral) is a second implementation beside it, chosen by
// make_mlp from the model config. Each implementation names what its forward saves for
// backward in its own MlpSaved, and what its backward needs as scratch in its own MlpGrads;
// the block allocates them through the implementation, once, and hands them back on every
// call, so no call allocates. forward reads only x and the parameters and writes only
// `saved` and `out`, so it can run again inside backward (activation checkpointing).
#pragma once

#include <cstdint>
#include <memory>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

// What an MLP's forward saves for its backward (one per block); each implementation
// derives its own.
struct MlpSaved {
  virtual ~MlpSaved() = default;
};

// An MLP's backward scratch, shared by every block (backward runs one block at a time).
struct MlpGrads {
  virtual ~MlpGrads() = default;
};

class MlpSublayer {
 public:
  virtual ~MlpSublayer() = default;

  // Buffers for `rows` token rows in the compute dtype on the device.
  virtual std::unique_ptr<MlpSaved> make_saved(int64_t rows, DType dtype, Device device) const = 0;
  virtual std::unique_ptr<MlpGrads> make_grads(int64_t rows, DType dtype, Device device) const = 0;

  // out = x + mlp(rmsnorm(x)) over the rows of x ([rows, C]). out may be x itself (the
  // inference path updates the residual stream in place); `saved` may hold more rows than
  // x (an inference decoder's scratch, sized for its longest chunk).
  virtual void forward(const Tensor& x, const Tensor& params, MlpSaved& saved, const Tensor& out) const = 0;
  // On entry dres = dL/d(out); on exit dres = dL/dx. Parameter gradients are added into
  // `grads` (the unit's flat gradient buffer). dh is [rows, C] scratch.
  virtual void backward(const Tensor& x, const MlpSaved& saved, const Tensor& params, const Tensor& grads,
                        const Tensor& dres, const Tensor& dh, MlpGrads& g) const = 0;
};

// The MLP the config asks for, its slots resolved in the block's unit layout.
std::unique_ptr<MlpSublayer> make_mlp(const LlamaConfig& cfg, const UnitLayout& block);

}  // namespace fsdp::model
