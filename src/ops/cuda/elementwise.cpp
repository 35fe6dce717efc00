// The CUDA implementations of the whole-tensor ops (fsdp/ops/elementwise.h), registered
// into the ops' dispatch stubs: arguments were validated by the front end; this side picks
// the device and stream and hands raw pointers to the launchers in elementwise.cu.
#include "elementwise.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp {
namespace {

cudaStream_t stream_of(const Tensor& t) { return static_cast<cudaStream_t>(cuda::current_stream(t.device().index)); }

void check_supported(const char* op, const Tensor& t) {
  FSDP_CHECK(cuda::elementwise_supports(t.dtype()), "{}: dtype {} is not implemented on the CUDA backend", op,
             dtype_name(t.dtype()));
}

void add_cuda(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_supported("add", a);
  if (a.numel() == 0) return;
  cuda::DeviceGuard guard(a.device().index);
  cuda::launch_add(a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(), stream_of(a));
}

void scale_cuda(const Tensor& x, double alpha) {
  check_supported("scale_", x);
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_scale(x.dtype(), x.data_ptr(), alpha, x.numel(), stream_of(x));
}

void fill_cuda(const Tensor& x, double value) {
  if (x.numel() == 0) return;
  uint64_t pattern = 0;
  store_from_double(&pattern, x.dtype(), value);  // little-endian: the low element_size bytes
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_fill(x.element_size(), x.data_ptr(), pattern, x.numel(), stream_of(x));
}

void cast_cuda(const Tensor& src, const Tensor& dst) {
  check_supported("cast", src);
  check_supported("cast", dst);
  if (src.numel() == 0) return;
  cuda::DeviceGuard guard(src.device().index);
  cuda::launch_cast(src.dtype(), src.data_ptr(), dst.dtype(), dst.data_ptr(), src.numel(), stream_of(src));
}

double sum_squares_cuda(const Tensor& x) {
  check_supported("sum_squares", x);
  if (x.numel() == 0) return 0.0;
  cuda::DeviceGuard guard(x.device().index);
  return cuda::sum_squares(x.dtype(), x.data_ptr(), x.numel(), stream_of(x));
}

}  // namespace

FSDP_REGISTER_DISPATCH(add_stub, DeviceType::CUDA, &add_cuda);
FSDP_REGISTER_DISPATCH(scale_stub, DeviceType::CUDA, &scale_cuda);
FSDP_REGISTER_DISPATCH(fill_stub, DeviceType::CUDA, &fill_cuda);
FSDP_REGISTER_DISPATCH(cast_stub, DeviceType::CUDA, &cast_cuda);
FSDP_REGISTER_DISPATCH(sum_squares_stub, DeviceType::CUDA, &sum_squares_cuda);

}  // namespace fsdp
