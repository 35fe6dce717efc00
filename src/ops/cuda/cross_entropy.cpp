// The CUDA fused softmax cross-entropy (fsdp/ops/cross_entropy.h) registered into
// cross_entropy_stub: targets are validated first (the CPU's message), then one kernel.
#include "cross_entropy.cuh"

#include "fsdp/core/cuda.h"
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
  const cuda::BadTarget bad = cuda::find_bad_target(targets.dtype(), targets.data_ptr(), n, v, ignore_index, s);
  FSDP_CHECK(bad.row < 0, "target {} at row {} is outside [0, {}) and is not ignore_index ({})", bad.target, bad.row, v,
             ignore_index);
  cuda::launch_cross_entropy(logits.dtype(), targets.dtype(), rows(logits), targets.data_ptr(), losses.data_ptr(),
                             rows(dlogits), n, v, grad_scale, ignore_index, s);
}

}  // namespace

FSDP_REGISTER_DISPATCH(cross_entropy_stub, DeviceType::CUDA, &cross_entropy_cuda);

}  // namespace fsdp
