// The CUDA RMSNorm (fsdp/ops/rmsnorm.h) registered into its dispatch stubs: the front end
// validated shapes, dtypes and devices; this side hands rows and strides to rmsnorm.cu.
#include "rmsnorm.cuh"

#include "fsdp/ops/rmsnorm.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void rmsnorm_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, double eps) {
  cuda::check_implemented("rmsnorm_forward", x.dtype(), cuda::rmsnorm_supports);
  if (x.size(0) == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_rmsnorm_forward(x.dtype(), cuda::rows(x), w.data_ptr(), cuda::rows(y), rstd.data_ptr(), x.size(0),
                               x.size(1), eps, cuda::stream_of(x));
}

void rmsnorm_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dw, bool accumulate_dx) {
  cuda::check_implemented("rmsnorm_backward", x.dtype(), cuda::rmsnorm_supports);
  if (x.size(0) == 0 || x.size(1) == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_rmsnorm_backward(x.dtype(), cuda::rows(dy), cuda::rows(x), w.data_ptr(), rstd.data_ptr(), cuda::rows(dx),
                                dw.defined() ? dw.data_ptr() : nullptr, x.size(0), x.size(1), accumulate_dx, cuda::stream_of(x));
}

}  // namespace

FSDP_REGISTER_DISPATCH(rmsnorm_forward_stub, DeviceType::CUDA, &rmsnorm_forward_cuda);
FSDP_REGISTER_DISPATCH(rmsnorm_backward_stub, DeviceType::CUDA, &rmsnorm_backward_cuda);

}  // namespace fsdp
