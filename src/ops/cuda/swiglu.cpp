// The CUDA SwiGLU (fsdp/ops/swiglu.h) registered into its dispatch stubs; the front end
// validated shapes, dtypes, devices and packed rows.
#include "swiglu.cuh"

#include "fsdp/ops/swiglu.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void swiglu_forward_cuda(const Tensor& gate, const Tensor& up, const Tensor& out) {
  cuda::check_implemented("swiglu_forward", gate.dtype(), cuda::swiglu_supports);
  if (gate.numel() == 0) return;
  cuda::DeviceGuard guard(gate.device().index);
  cuda::launch_swiglu_forward(gate.dtype(), cuda::rows(gate), cuda::rows(up), cuda::rows(out), gate.size(0),
                              gate.size(1), cuda::stream_of(gate));
}

void swiglu_backward_cuda(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                          const Tensor& dup) {
  cuda::check_implemented("swiglu_backward", gate.dtype(), cuda::swiglu_supports);
  if (gate.numel() == 0) return;
  cuda::DeviceGuard guard(gate.device().index);
  cuda::launch_swiglu_backward(gate.dtype(), cuda::rows(dout), cuda::rows(gate), cuda::rows(up), cuda::rows(dgate),
                               cuda::rows(dup), gate.size(0), gate.size(1), cuda::stream_of(gate));
}

}  // namespace

FSDP_REGISTER_DISPATCH(swiglu_forward_stub, DeviceType::CUDA, &swiglu_forward_cuda);
FSDP_REGISTER_DISPATCH(swiglu_backward_stub, DeviceType::CUDA, &swiglu_backward_cuda);

}  // namespace fsdp
