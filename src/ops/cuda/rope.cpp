// The CUDA RoPE (fsdp/ops/rope.h) registered into rope_stub; the front end validated the
// layout, the tables and the positions.
#include "rope.cuh"

#include "fsdp/ops/rope.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void rope_cuda(const Tensor& x, const Tensor& y, const Tensor& cos, const Tensor& sin, int64_t pos_offset,
               bool inverse, const Tensor& doc_start) {
  cuda::check_implemented("rope", x.dtype(), cuda::rope_supports);
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  const cuda::RopeArgs a{x.data_ptr(), x.stride(0),  x.stride(1),  y.data_ptr(), y.stride(0),       y.stride(1),
                         x.size(0),    x.size(1),    x.size(2),    x.size(3),    cos.data<float>(), sin.data<float>(),
                         pos_offset,   inverse,      doc_start.defined() ? doc_start.data<int32_t>() : nullptr};
  cuda::launch_rope(x.dtype(), a, cuda::stream_of(x));
}

}  // namespace

FSDP_REGISTER_DISPATCH(rope_stub, DeviceType::CUDA, &rope_cuda);

}  // namespace fsdp
