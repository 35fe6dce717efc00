// Token permutation for a dropless mixture of experts: the (token, choice) pairs sorted by
// expert so each expert's rows are one contiguous group its GEMMs run over, and back.
// N tokens, k choices each, E experts, C features; the flat pair index is f = t * k + j.
//
//   moe_permute_plan:  a stable sort of the pairs by expert[f]: sorted position s holds
//                      order[s] = f, slot[f] = s is its inverse, and expert e's rows are
//                      [offsets[e], offsets[e + 1]) (offsets[0] = 0, offsets[E] = N k).
//                      expert [N, k], order and slot [N k], offsets [E + 1]: int32.
//   moe_gather_rows:   xs[s] = x[order[s] / k]                       x [N, C], xs [N k, C]
//   ..._backward:      dx[t] (+)= sum_{j < k} dxs[slot[t k + j]], in j order
//   moe_combine:       out[t] = residual[t] + sum_{j < k} w_tj ys[slot[t k + j]], in j order
//                      (residual undefined = 0; it may alias out). w [N, k] in the stat
//                      dtype is rounded to the data dtype first, as transformers casts the
//                      routing weights to the hidden dtype before multiplying.
//   ..._backward:      dys[slot[t k + j]] = w_tj dout[t];  dweight_tj = <dout[t], ys[slot[t k + j]]>
//
// Sums run in float32 (float64 for float64 data) in the order written and round once into
// the output; every output element has one writer, so no backend needs floating-point
// atomics and every run gives the same bits.
#pragma once

#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

void moe_permute_plan(const Tensor& expert, int64_t num_experts, const Tensor& order, const Tensor& slot,
                      const Tensor& offsets);
void moe_gather_rows(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs);
void moe_gather_rows_backward(const Tensor& dxs, const Tensor& slot, int64_t k, const Tensor& dx, bool accumulate);
void moe_combine(const Tensor& ys, const Tensor& slot, const Tensor& weight, const Tensor& residual,
                 const Tensor& out);
void moe_combine_backward(const Tensor& dout, const Tensor& ys, const Tensor& slot, const Tensor& weight,
                          const Tensor& dys, const Tensor& dweight);

using moe_permute_plan_fn = void (*)(const Tensor&, int64_t, const Tensor&, const Tensor&, const Tensor&);
using moe_gather_rows_fn = void (*)(const Tensor&, const Tensor&, int64_t, const Tensor&);
using moe_gather_rows_backward_fn = void (*)(const Tensor&, const Tensor&, int64_t, const Tensor&, bool);
using moe_combine_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);
using moe_combine_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&);
FSDP_DECLARE_DISPATCH(moe_permute_plan_fn, moe_permute_plan_stub);
FSDP_DECLARE_DISPATCH(moe_gather_rows_fn, moe_gather_rows_stub);
FSDP_DECLARE_DISPATCH(moe_gather_rows_backward_fn, moe_gather_rows_backward_stub);
FSDP_DECLARE_DISPATCH(moe_combine_fn, moe_combine_stub);
FSDP_DECLARE_DISPATCH(moe_combine_backward_fn, moe_combine_backward_stub);

}  // namespace fsdp
