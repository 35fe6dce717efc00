// Front end of the small whole-tensor ops: validates once for all backends, then
// dispatches on the device. All of them take contiguous tensors (flat shards and
// parameter buffers), which lets every backend treat them as 1-D runs.
#include "fsdp/ops/elementwise.h"


#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(add_stub);
FSDP_DEFINE_DISPATCH(scale_stub);
FSDP_DEFINE_DISPATCH(sum_squares_stub);

namespace {

void check_float_contiguous(const Tensor& t, const char* what) {
  check_defined(t, what);
  detail::check_floating(t, what);
  check_contiguous(t, what);
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_float_contiguous(a, "a");
  check_shape(b, a.sizes(), "b");
  check_same_dtype(b, a, "b", "a");
  check_contiguous(b, "b");
  check_same_device(b, a, "b", "a");
  check_shape(out, a.sizes(), "out");
  check_same_dtype(out, a, "out", "a");
  check_contiguous(out, "out");
  check_same_device(out, a, "out", "a");
  add_stub(a.device(), a, b, out);
}

void scale_(const Tensor& x, double alpha) {
  check_float_contiguous(x, "x");
  scale_stub(x.device(), x, alpha);
}

// Any dtype (integer buffers need zeroing too); the value is stored as the dtype would
// store it, so 0.0 is all-zero bits everywhere.
void fill_(const Tensor& x, double value) {
  check_defined(x, "x");
  check_contiguous(x, "x");
  check_fill_value(x, value);
  fill_stub(x.device(), x, value);
}

void cast(const Tensor& src, const Tensor& dst) {
  check_float_contiguous(src, "src");
  check_float_contiguous(dst, "dst");
  check_shape(dst, src.sizes(), "dst");
  check_same_device(dst, src, "dst", "src");
  cast_stub(src.device(), src, dst);
}

double sum_squares(const Tensor& x) {
  check_float_contiguous(x, "x");
  return sum_squares_stub(x.device(), x);
}

}  // namespace fsdp
