// The SwiGLU gate of Llama's MLP: out = silu(gate) * up, silu(g) = g * sigmoid(g).
// (The three projections around it are matmuls; gate and up come from one fused GEMM
// and arrive as two column-views of one [N, 2F] buffer.)
//   gate, up, out, dout, dgate, dup: [N, F] packed rows, same float dtype.
// Backward overwrites dgate and dup:
//   dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dout * silu(g)
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                     const Tensor& dup);

using swiglu_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
using swiglu_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(swiglu_forward_fn, swiglu_forward_stub);
FSDP_DECLARE_DISPATCH(swiglu_backward_fn, swiglu_backward_stub);

}  // namespace fsdp
