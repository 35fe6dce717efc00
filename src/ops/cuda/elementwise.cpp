// The CUDA implementations of the whole-tensor ops (fsdp/ops/elementwise.h), registered
// into the ops' dispatch stubs: arguments were validated by the front end; this side picks
// the device and stream and hands raw pointers to the launchers in elementwise.cu.
#include "elementwise.cuh"

#include "fsdp/ops/elementwise.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void add_cuda(const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::check_implemented("add", a.dtype(), cuda::elementwise_supports);
  if (a.numel() == 0) return;
  cuda::DeviceGuard guard(a.device().index);
  cuda::launch_add(a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(), cuda::stream_of(a));
}

void scale_cuda(const Tensor& x, double alpha) {
  cuda::check_implemented("scale_", x.dtype(), cuda::elementwise_supports);
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_scale(x.dtype(), x.data_ptr(), alpha, x.numel(), cuda::stream_of(x));
}

void fill_cuda(const Tensor& x, double value) {
  if (x.numel() == 0) return;
  uint64_t pattern = 0;
  store_from_double(&pattern, x.dtype(), value);  // little-endian: the low element_size bytes
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_fill(x.element_size(), x.data_ptr(), pattern, x.numel(), cuda::stream_of(x));
}

void cast_cuda(const Tensor& src, const Tensor& dst) {
  cuda::check_implemented("cast", src.dtype(), cuda::elementwise_supports);
  cuda::check_implemented("cast", dst.dtype(), cuda::elementwise_supports);
  if (src.numel() == 0) return;
  cuda::DeviceGuard guard(src.device().index);
  cuda::launch_cast(src.dtype(), src.data_ptr(), dst.dtype(), dst.data_ptr(), src.numel(), cuda::stream_of(src));
}

double sum_squares_cuda(const Tensor& x) {
  cuda::check_implemented("sum_squares", x.dtype(), cuda::elementwise_supports);
  if (x.numel() == 0) return 0.0;
  cuda::DeviceGuard guard(x.device().index);
  return cuda::sum_squares(x.dtype(), x.data_ptr(), x.numel(), cuda::stream_of(x));
}

}  // namespace

FSDP_REGISTER_DISPATCH(add_stub, DeviceType::CUDA, &add_cuda);
FSDP_REGISTER_DISPATCH(scale_stub, DeviceType::CUDA, &scale_cuda);
FSDP_REGISTER_DISPATCH(fill_stub, DeviceType::CUDA, &fill_cuda);
FSDP_REGISTER_DISPATCH(cast_stub, DeviceType::CUDA, &cast_cuda);
FSDP_REGISTER_DISPATCH(sum_squares_stub, DeviceType::CUDA, &sum_squares_cuda);

}  // namespace fsdp
