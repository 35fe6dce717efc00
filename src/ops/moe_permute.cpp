// Front end of the MoE token permutation: validates every argument once for all backends,
// then dispatches on the device. See moe_permute.h for the math. Expert ids are checked by
// the backend, which holds their values.
#include "fsdp/ops/moe_permute.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(moe_permute_plan_stub);
FSDP_DEFINE_DISPATCH(moe_gather_rows_stub);
FSDP_DEFINE_DISPATCH(moe_gather_rows_backward_stub);
FSDP_DEFINE_DISPATCH(moe_combine_stub);
FSDP_DEFINE_DISPATCH(moe_combine_backward_stub);

namespace {

void check_index(const Tensor& t, const Dims& shape, const Tensor& like, const char* what) {
  check_dtype(t, DType::I32, what);
  check_shape(t, shape, what);
  check_contiguous(t, what);
  check_same_device(t, like, what, "the data");
}

// x [N, C] and its expanded rows xs [N k, C]: same dtype and device, packed rows.
void check_pair(const Tensor& x, const Tensor& xs, int64_t k, const char* xw, const char* xsw) {
  FSDP_CHECK(k >= 1, "moe: k = {} choices per token must be >= 1", k);
  detail::check_float_rows(x, xw);
  detail::check_float_rows(xs, xsw);
  check_shape(xs, Dims{x.size(0) * k, x.size(1)}, xsw);
  check_same_dtype(xs, x, xsw, xw);
  check_same_device(xs, x, xsw, xw);
}

void check_weight(const Tensor& w, const Tensor& x, int64_t k, const char* what) {
  check_dtype(w, stat_dtype(x.dtype()), what);
  check_shape(w, Dims{x.size(0), k}, what);
  check_contiguous(w, what);
  check_same_device(w, x, what, "the data");
}

}  // namespace

void moe_permute_plan(const Tensor& expert, int64_t num_experts, const Tensor& order, const Tensor& slot,
                      const Tensor& offsets) {
  check_dim(expert, 2, "expert");
  check_dtype(expert, DType::I32, "expert");
  check_contiguous(expert, "expert");
  FSDP_CHECK(num_experts >= 1, "moe_permute_plan: num_experts = {} must be >= 1", num_experts);
  const int64_t pairs = expert.numel();
  check_index(order, Dims{pairs}, expert, "order");
  check_index(slot, Dims{pairs}, expert, "slot");
  check_index(offsets, Dims{num_experts + 1}, expert, "offsets");
  moe_permute_plan_stub(expert.device(), expert, num_experts, order, slot, offsets);
}

void moe_gather_rows(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs) {
  check_pair(x, xs, k, "x", "xs");
  check_index(order, Dims{xs.size(0)}, x, "order");
  moe_gather_rows_stub(x.device(), x, order, k, xs);
}

void moe_gather_rows_backward(const Tensor& dxs, const Tensor& slot, int64_t k, const Tensor& dx, bool accumulate) {
  check_pair(dx, dxs, k, "dx", "dxs");
  check_index(slot, Dims{dxs.size(0)}, dx, "slot");
  moe_gather_rows_backward_stub(dx.device(), dxs, slot, k, dx, accumulate);
}

void moe_combine(const Tensor& ys, const Tensor& slot, const Tensor& weight, const Tensor& residual,
                 const Tensor& out) {
  check_defined(weight, "weight");
  check_dim(weight, 2, "weight");
  const int64_t k = weight.size(1);
  check_pair(out, ys, k, "out", "ys");
  check_index(slot, Dims{ys.size(0)}, out, "slot");
  check_weight(weight, out, k, "weight");
  if (residual.defined()) detail::check_rows_like(residual, out, "residual", "out");
  moe_combine_stub(out.device(), ys, slot, weight, residual, out);
}

void moe_combine_backward(const Tensor& dout, const Tensor& ys, const Tensor& slot, const Tensor& weight,
                          const Tensor& dys, const Tensor& dweight) {
  check_defined(weight, "weight");
  check_dim(weight, 2, "weight");
  const int64_t k = weight.size(1);
  check_pair(dout, ys, k, "dout", "ys");
  detail::check_rows_like(dys, ys, "dys", "ys");
  check_index(slot, Dims{ys.size(0)}, dout, "slot");
  check_weight(weight, dout, k, "weight");
  check_weight(dweight, dout, k, "dweight");
  moe_combine_backward_stub(dout.device(), dout, ys, slot, weight, dys, dweight);
}

}  // namespace fsdp
