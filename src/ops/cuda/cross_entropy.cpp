// The CUDA fused softmax cross-entropy (fsdp/ops/cross_entropy.h) registered into
// cross_entropy_stub: one kernel, which also validates the targets into the device error
// record (raised with the CPU's message at the next read-back; Note [Device error record]
// in fsdp/core/cuda.h), so the host does not wait here.
#include "cross_entropy.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/cross_entropy.h"

namespace fsdp {
namespace {

cuda::RowsView rows(const Tensor& t) {
  if (!t.defined()) return cuda::RowsView{nullptr, 0};
  return cuda::RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)};
}

void cross_entropy_cuda(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
                        double grad_scale, int64_t ignore_index) {
  FSDP_CHECK(cuda::cross_entropy_supports(logits.dtype()), "cross_entropy: dtype {} is not implemented on the CUDA backend",
             dtype_name(logits.dtype()));
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  auto* s = static_cast<cudaStream_t>(cuda::current_stream(logits.device().index));
  cuda::launch_cross_entropy(logits.dtype(), targets.dtype(), rows(logits), targets.data_ptr(), losses.data_ptr(),
                             rows(dlogits), n, v, grad_scale, ignore_index,
                             cuda::device_error_record(logits.device().index), s);
}

}  // namespace

FSDP_REGISTER_DISPATCH(cross_entropy_stub, DeviceType::CUDA, &cross_entropy_cuda);

}  // namespace fsdp
