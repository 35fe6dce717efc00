// Small whole-tensor ops the model, optimizer and FSDP engine need on any device.
//   add(a, b, out):     out = a + b  (same shape and dtype; out may alias a or b)
//   scale_(x, alpha):   x *= alpha
//   fill_(x, value)
//   cast(src, dst):     dst = src converted to dst's dtype (same shape; e.g. fp32 master
//                       -> bf16 compute copy), rounding to nearest even
//   sum_squares(x):     sum of x^2 accumulated in double, over fixed-size blocks combined
//                       in a fixed order: the same bits for any thread count
// Tensors are contiguous unless stated otherwise.
#pragma once

#include "fsdp/core/device_kernels.h"  // fill_stub, cast_stub: core declares them
#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

void add(const Tensor& a, const Tensor& b, const Tensor& out);
void scale_(const Tensor& x, double alpha);
void fill_(const Tensor& x, double value);
void cast(const Tensor& src, const Tensor& dst);
double sum_squares(const Tensor& x);

using add_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
using scale_fn = void (*)(const Tensor&, double);
using sum_squares_fn = double (*)(const Tensor&);
FSDP_DECLARE_DISPATCH(add_fn, add_stub);
FSDP_DECLARE_DISPATCH(scale_fn, scale_stub);
FSDP_DECLARE_DISPATCH(sum_squares_fn, sum_squares_stub);

}  // namespace fsdp
