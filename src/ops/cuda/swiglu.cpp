// The CUDA SwiGLU (fsdp/ops/swiglu.h) registered into its dispatch stubs; the front end
// validated shapes, dtypes, devices and packed rows.
#include "swiglu.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp {
namespace {

cuda::RowsView rows(const Tensor& t) { return cuda::RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)}; }

cudaStream_t stream_of(const Tensor& t) { return static_cast<cudaStream_t>(cuda::current_stream(t.device().index)); }

void check_supported(const char* op, const Tensor& t) {
  FSDP_CHECK(cuda::swiglu_supports(t.dtype()), "{}: dtype {} is not implemented on the CUDA backend", op,
             dtype_name(t.dtype()));
}

void swiglu_forward_cuda(const Tensor& gate, const Tensor& up, const Tensor& out) {
  check_supported("swiglu_forward", gate);
  if (gate.numel() == 0) return;
  cuda::DeviceGuard guard(gate.device().index);
  cuda::launch_swiglu_forward(gate.dtype(), rows(gate), rows(up), rows(out), gate.size(0), gate.size(1),
                              stream_of(gate));
}

void swiglu_backward_cuda(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                          const Tensor& dup) {
  check_supported("swiglu_backward", gate);
  if (gate.numel() == 0) return;
  cuda::DeviceGuard guard(gate.device().index);
  cuda::launch_swiglu_backward(gate.dtype(), rows(dout), rows(gate), rows(up), rows(dgate), rows(dup), gate.size(0),
                               gate.size(1), stream_of(gate));
}

}  // namespace

FSDP_REGISTER_DISPATCH(swiglu_forward_stub, DeviceType::CUDA, &swiglu_forward_cuda);
FSDP_REGISTER_DISPATCH(swiglu_backward_stub, DeviceType::CUDA, &swiglu_backward_cuda);

}  // namespace fsdp
