// Front end of SwiGLU: validates every argument once for all backends, then dispatches on
// the device. All tensors are [N, F] with packed rows: gate and up usually are the two
// column halves of one fused [N, 2F] GEMM output, so row strides are free.
#include "fsdp/ops/swiglu.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(swiglu_forward_stub);
FSDP_DEFINE_DISPATCH(swiglu_backward_stub);

namespace {

void check_gate(const Tensor& gate) {
  check_dim(gate, 2, "gate");
  FSDP_CHECK(is_floating(gate.dtype()), "gate must be a floating-point tensor, got {}", gate.str());
  check_rows_packed(gate, "gate");
}

void check_like_gate(const Tensor& t, const Tensor& gate, const char* what) {
  check_shape(t, gate.sizes(), what);
  check_same_dtype(t, gate, what, "gate");
  check_rows_packed(t, what);
  check_same_device(t, gate, what, "gate");
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  check_gate(gate);
  check_like_gate(up, gate, "up");
  check_like_gate(out, gate, "out");
  swiglu_forward_stub.get(gate.device())(gate, up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                     const Tensor& dup) {
  check_gate(gate);
  check_like_gate(dout, gate, "dout");
  check_like_gate(up, gate, "up");
  check_like_gate(dgate, gate, "dgate");
  check_like_gate(dup, gate, "dup");
  swiglu_backward_stub.get(gate.device())(dout, gate, up, dgate, dup);
}

}  // namespace fsdp
