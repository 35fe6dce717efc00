// Front end of SwiGLU: validates every argument once for all backends, then dispatches on
// the device. All tensors are [N, F] with packed rows: gate and up usually are the two
// column halves of one fused [N, 2F] GEMM output, so row strides are free.
#include "fsdp/ops/swiglu.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(swiglu_forward_stub);
FSDP_DEFINE_DISPATCH(swiglu_backward_stub);

using detail::check_float_rows;
using detail::check_rows_like;

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  check_float_rows(gate, "gate");
  check_rows_like(up, gate, "up", "gate");
  check_rows_like(out, gate, "out", "gate");
  swiglu_forward_stub(gate.device(), gate, up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                     const Tensor& dup) {
  check_float_rows(gate, "gate");
  check_rows_like(dout, gate, "dout", "gate");
  check_rows_like(up, gate, "up", "gate");
  check_rows_like(dgate, gate, "dgate", "gate");
  check_rows_like(dup, gate, "dup", "gate");
  swiglu_backward_stub(gate.device(), dout, gate, up, dgate, dup);
}

}  // namespace fsdp
