// The CUDA MoE router (fsdp/ops/moe_router.h) registered into its dispatch stubs; the
// front end validated shapes, dtypes and devices.
#include "moe_router.cuh"

#include "fsdp/ops/moe_router.h"
#include "launch_args.h"

namespace fsdp {
namespace {

const void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

void check_supported(const char* op, const Tensor& logits) {
  cuda::check_implemented(op, logits.dtype(), cuda::moe_router_supports);
  FSDP_CHECK(logits.size(1) <= cuda::kMoeRouterMaxExperts, "{}: {} experts; the CUDA router takes at most {}", op,
             logits.size(1), cuda::kMoeRouterMaxExperts);
}

void forward_cuda(const Tensor& logits, int64_t k, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                  const Tensor& weight, const Tensor& bias) {
  check_supported("moe_router_forward", logits);
  if (logits.size(0) == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  cuda::launch_moe_router_forward(logits.dtype(), logits.data_ptr(), cuda::rows(logits).stride, logits.size(0),
                                  logits.size(1), k, bias.defined() ? bias.data<float>() : nullptr,
                                  probs.data_ptr(), lse.data_ptr(), expert.data<int32_t>(),
                                  weight.data_ptr(), cuda::stream_of(logits));
}

void stats_cuda(const Tensor& probs, const Tensor& expert, const Tensor& lse, const Tensor& prob_sum,
                const Tensor& count, const Tensor& lse_sq_sum) {
  cuda::DeviceGuard guard(probs.device().index);
  cuda::launch_moe_router_stats(probs.dtype(), probs.data_ptr(), expert.data<int32_t>(), lse.data_ptr(),
                                probs.size(0), probs.size(1), expert.size(1), prob_sum.data_ptr(),
                                count.data<int32_t>(), lse_sq_sum.data_ptr(), cuda::stream_of(probs));
}

void backward_cuda(const Tensor& dweight, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                   const Tensor& weight, const Tensor& aux_grad, double z_scale, const Tensor& dlogits) {
  check_supported("moe_router_backward", dlogits);
  if (probs.size(0) == 0) return;
  cuda::DeviceGuard guard(probs.device().index);
  cuda::launch_moe_router_backward(dlogits.dtype(), data_or_null(dweight), probs.data_ptr(), lse.data_ptr(),
                                   expert.data<int32_t>(), weight.data_ptr(), data_or_null(aux_grad), z_scale,
                                   dlogits.data_ptr(), cuda::rows(dlogits).stride, probs.size(0), probs.size(1),
                                   expert.size(1), cuda::stream_of(probs));
}

}  // namespace

FSDP_REGISTER_DISPATCH(moe_router_forward_stub, DeviceType::CUDA, &forward_cuda);
FSDP_REGISTER_DISPATCH(moe_router_stats_stub, DeviceType::CUDA, &stats_cuda);
FSDP_REGISTER_DISPATCH(moe_router_backward_stub, DeviceType::CUDA, &backward_cuda);

}  // namespace fsdp
