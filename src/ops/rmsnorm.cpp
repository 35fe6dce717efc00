// Front end of RMSNorm: validates every argument once for all backends, then dispatches
// on the device. x, y, dy and dx may be row-strided views (packed rows suffice), so a
// column slice of a wider activation buffer needs no copy.
#include "fsdp/ops/rmsnorm.h"

#include <cmath>

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(rmsnorm_forward_stub);
FSDP_DEFINE_DISPATCH(rmsnorm_backward_stub);

namespace {

using detail::check_rows_like;

void check_channel(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, Dims{x.size(1)}, what);
  check_same_dtype(t, x, what, "x");
  check_contiguous(t, what);
  check_same_device(t, x, what, "x");
}

void check_rstd(const Tensor& rstd, const Tensor& x) {
  check_dtype(rstd, stat_dtype(x.dtype()), "rstd");
  check_shape(rstd, Dims{x.size(0)}, "rstd");
  check_contiguous(rstd, "rstd");
  check_same_device(rstd, x, "rstd", "x");
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, double eps) {
  detail::check_float_rows(x, "x");
  check_channel(w, x, "w");
  check_rows_like(y, x, "y", "x");
  check_rstd(rstd, x);
  FSDP_CHECK(std::isfinite(eps) && eps >= 0, "eps must be finite and >= 0, got {}", eps);
  rmsnorm_forward_stub(x.device(), x, w, y, rstd, eps);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw, bool accumulate_dx) {
  detail::check_float_rows(x, "x");
  check_rows_like(dy, x, "dy", "x");
  check_channel(w, x, "w");
  check_rstd(rstd, x);
  check_rows_like(dx, x, "dx", "x");
  if (dw.defined()) check_channel(dw, x, "dw");
  rmsnorm_backward_stub(x.device(), dy, x, w, rstd, dx, dw, accumulate_dx);
}

}  // namespace fsdp
