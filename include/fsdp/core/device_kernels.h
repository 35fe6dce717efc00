// The two kernels Tensor's own methods need on a device the host cannot touch: fill_ on a
// CUDA tensor and a dtype conversion inside copy_ (Note [Tensor copies across devices] in
// src/core/tensor.cpp). Core declares and defines the stubs; the op set's backends
// register their fill and cast kernels into them (src/ops/{cpu,cuda}/elementwise.cpp), and
// the checked front ends fsdp::fill_ and fsdp::cast (fsdp/ops/elementwise.h) call them. So
// core reaches the kernels without including ops, and ops depends on core, not the other
// way round.
#pragma once

#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

using fill_fn = void (*)(const Tensor&, double);
using cast_fn = void (*)(const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(fill_fn, fill_stub);
FSDP_DECLARE_DISPATCH(cast_fn, cast_stub);

// A fill value that `t`'s dtype can hold: any finite value, or any at all for floating
// tensors. Throws fsdp::Error naming the tensor otherwise.
void check_fill_value(const Tensor& t, double value);

}  // namespace fsdp
