// The CUDA fused softmax cross-entropy (fsdp/ops/cross_entropy.h) registered into
// cross_entropy_stub: one kernel, which also validates the targets into the device error
// record (raised with the CPU's message at the next read-back; Note [Device error record]
// in fsdp/core/cuda.h), so the host does not wait here.
#include "cross_entropy.cuh"

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/cross_entropy.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void cross_entropy_cuda(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
                        double grad_scale, int64_t ignore_index) {
  cuda::check_implemented("cross_entropy", logits.dtype(), cuda::cross_entropy_supports);
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  cuda::launch_cross_entropy(logits.dtype(), targets.dtype(), cuda::rows(logits), targets.data_ptr(),
                             losses.data_ptr(), cuda::rows(dlogits), n, v, grad_scale, ignore_index,
                             cuda::device_error_record(logits.device().index), cuda::stream_of(logits));
}

}  // namespace

FSDP_REGISTER_DISPATCH(cross_entropy_stub, DeviceType::CUDA, &cross_entropy_cuda);

}  // namespace fsdp
