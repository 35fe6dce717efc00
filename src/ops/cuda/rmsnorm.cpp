// The CUDA RMSNorm (fsdp/ops/rmsnorm.h) registered into its dispatch stubs: the front end
// validated shapes, dtypes and devices; this side hands rows and strides to rmsnorm.cu.
#include "rmsnorm.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp {
namespace {

cuda::RowsView rows(const Tensor& t) { return cuda::RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)}; }

cudaStream_t stream_of(const Tensor& t) { return static_cast<cudaStream_t>(cuda::current_stream(t.device().index)); }

void check_supported(const char* op, const Tensor& x) {
  FSDP_CHECK(cuda::rmsnorm_supports(x.dtype()), "{}: dtype {} is not implemented on the CUDA backend", op,
             dtype_name(x.dtype()));
}

void rmsnorm_forward_cuda(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, double eps) {
  check_supported("rmsnorm_forward", x);
  if (x.size(0) == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_rmsnorm_forward(x.dtype(), rows(x), w.data_ptr(), rows(y), rstd.data_ptr(), x.size(0), x.size(1), eps,
                               stream_of(x));
}

void rmsnorm_backward_cuda(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dw, bool accumulate_dx) {
  check_supported("rmsnorm_backward", x);
  if (x.size(0) == 0 || x.size(1) == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_rmsnorm_backward(x.dtype(), rows(dy), rows(x), w.data_ptr(), rstd.data_ptr(), rows(dx), dw.data_ptr(),
                                x.size(0), x.size(1), accumulate_dx, stream_of(x));
}

}  // namespace

FSDP_REGISTER_DISPATCH(rmsnorm_forward_stub, DeviceType::CUDA, &rmsnorm_forward_cuda);
FSDP_REGISTER_DISPATCH(rmsnorm_backward_stub, DeviceType::CUDA, &rmsnorm_backward_cuda);

}  // namespace fsdp
