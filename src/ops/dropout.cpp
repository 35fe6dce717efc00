// Front end of dropout (fsdp/ops/dropout.h): the mask's rule, written once for the host,
// and the argument checks every backend relies on.
#include "fsdp/ops/dropout.h"

#include <cmath>

#include "fsdp/core/random.h"
#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(dropout_forward_stub);
FSDP_DEFINE_DISPATCH(dropout_backward_stub);

uint64_t dropout_threshold(double p) { return uint64_t(std::ceil(p * 0x1.0p53)); }

bool dropout_keeps(uint64_t key, int64_t row, int64_t col, uint64_t threshold) {
  return (splitmix64(mix_key(mix_key(key, uint64_t(row)), uint64_t(col))) >> 11) >= threshold;
}

namespace {

DropoutArgs args_for(double p, uint64_t key, int64_t row0, int64_t col0) {
  FSDP_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got {}", p);
  FSDP_CHECK(row0 >= 0, "dropout: row0 must be >= 0, got {}", row0);
  FSDP_CHECK(col0 >= 0, "dropout: col0 must be >= 0, got {}", col0);
  return DropoutArgs{key, row0, col0, dropout_threshold(p), 1.0 / (1.0 - p)};
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& out, double p, uint64_t key, int64_t row0, int64_t col0) {
  detail::check_float_rows(x, "x");
  detail::check_rows_like(out, x, "out", "x");
  const DropoutArgs a = args_for(p, key, row0, col0);
  if (x.numel() == 0) return;
  dropout_forward_stub(x.device(), x, out, a);
}

void dropout_backward(const Tensor& dout, const Tensor& dx, double p, uint64_t key, int64_t row0, bool accumulate,
                      int64_t col0) {
  detail::check_float_rows(dout, "dout");
  detail::check_rows_like(dx, dout, "dx", "dout");
  const DropoutArgs a = args_for(p, key, row0, col0);
  if (dout.numel() == 0) return;
  dropout_backward_stub(dout.device(), dout, dx, a, accumulate);
}

}  // namespace fsdp
