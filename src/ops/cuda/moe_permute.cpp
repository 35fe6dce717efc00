// The CUDA MoE token permutation (fsdp/ops/moe_permute.h) registered into its dispatch
// stubs; the front end validated shapes, dtypes and devices.
#include "moe_permute.cuh"

#include "fsdp/ops/moe_permute.h"
#include "launch_args.h"

namespace fsdp {
namespace {

using cuda::rows;
using cuda::stream_of;

void check_supported(const char* op, const Tensor& t) { cuda::check_implemented(op, t.dtype(), cuda::moe_permute_supports); }

void plan_cuda(const Tensor& expert, int64_t num_experts, const Tensor& order, const Tensor& slot,
               const Tensor& offsets) {
  cuda::DeviceGuard guard(expert.device().index);
  cuda::launch_moe_permute_plan(expert.data<int32_t>(), expert.numel(), num_experts, order.data<int32_t>(),
                                slot.data<int32_t>(), offsets.data<int32_t>(), stream_of(expert));
}

void gather_cuda(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs) {
  check_supported("moe_gather_rows", x);
  if (xs.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  cuda::launch_moe_gather_rows(x.dtype(), rows(x), order.data<int32_t>(), k, rows(xs), xs.size(0), xs.size(1),
                               stream_of(x));
}

void gather_backward_cuda(const Tensor& dxs, const Tensor& slot, int64_t k, const Tensor& dx, bool accumulate) {
  check_supported("moe_gather_rows_backward", dx);
  if (dx.numel() == 0) return;
  cuda::DeviceGuard guard(dx.device().index);
  cuda::launch_moe_gather_rows_backward(dx.dtype(), rows(dxs), slot.data<int32_t>(), k, rows(dx), dx.size(0),
                                        dx.size(1), accumulate, stream_of(dx));
}

void combine_cuda(const Tensor& ys, const Tensor& slot, const Tensor& weight, const Tensor& residual,
                  const Tensor& out) {
  check_supported("moe_combine", out);
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(out.device().index);
  const int64_t rs = residual.defined() ? rows(residual).stride : 0;
  cuda::launch_moe_combine(out.dtype(), rows(ys), slot.data<int32_t>(), weight.data_ptr(),
                           residual.defined() ? residual.data_ptr() : nullptr, rs, rows(out), out.size(0),
                           weight.size(1), out.size(1), stream_of(out));
}

void combine_backward_cuda(const Tensor& dout, const Tensor& ys, const Tensor& slot, const Tensor& weight,
                           const Tensor& dys, const Tensor& dweight) {
  check_supported("moe_combine_backward", dout);
  if (dout.size(0) == 0) return;
  cuda::DeviceGuard guard(dout.device().index);
  cuda::launch_moe_combine_backward(dout.dtype(), rows(dout), rows(ys), slot.data<int32_t>(), weight.data_ptr(),
                                    rows(dys), dweight.data_ptr(), dout.size(0), weight.size(1), dout.size(1),
                                    stream_of(dout));
}

}  // namespace

FSDP_REGISTER_DISPATCH(moe_permute_plan_stub, DeviceType::CUDA, &plan_cuda);
FSDP_REGISTER_DISPATCH(moe_gather_rows_stub, DeviceType::CUDA, &gather_cuda);
FSDP_REGISTER_DISPATCH(moe_gather_rows_backward_stub, DeviceType::CUDA, &gather_backward_cuda);
FSDP_REGISTER_DISPATCH(moe_combine_stub, DeviceType::CUDA, &combine_cuda);
FSDP_REGISTER_DISPATCH(moe_combine_backward_stub, DeviceType::CUDA, &combine_backward_cuda);

}  // namespace fsdp
