// The CUDA dropout (fsdp/ops/dropout.h) registered into its dispatch stubs; the front end
// validated shapes, dtypes, devices and packed rows, and computed the threshold and scale.
#include "dropout.cuh"

#include "fsdp/ops/dropout.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void run(const char* op, const Tensor& src, const Tensor& dst, const DropoutArgs& a, bool accumulate) {
  cuda::check_implemented(op, src.dtype(), cuda::dropout_supports);
  cuda::DeviceGuard guard(src.device().index);
  cuda::launch_dropout(src.dtype(), cuda::rows(src), cuda::rows(dst), src.size(0), src.size(1), a.key, a.row0,
                       a.col0, a.threshold, a.scale, accumulate, cuda::stream_of(src));
}

void dropout_forward_cuda(const Tensor& x, const Tensor& out, const DropoutArgs& a) {
  run("dropout_forward", x, out, a, false);
}

void dropout_backward_cuda(const Tensor& dout, const Tensor& dx, const DropoutArgs& a, bool accumulate) {
  run("dropout_backward", dout, dx, a, accumulate);
}

}  // namespace

FSDP_REGISTER_DISPATCH(dropout_forward_stub, DeviceType::CUDA, &dropout_forward_cuda);
FSDP_REGISTER_DISPATCH(dropout_backward_stub, DeviceType::CUDA, &dropout_backward_cuda);

}  // namespace fsdp
