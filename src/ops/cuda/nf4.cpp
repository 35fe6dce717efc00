// The CUDA NF4 dequantizer (fsdp/ops/nf4.h) registered into its dispatch stub; the front
// end checked every piece's dtype, size, contiguity and device.
#include "nf4.cuh"

#include "fsdp/ops/nf4.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void nf4_dequantize_cuda(const Nf4Tensors& w, DType value_dtype, const Tensor& out) {
  cuda::check_implemented("nf4_dequantize", out.dtype(), cuda::nf4_dequantize_supports);
  cuda::DeviceGuard guard(out.device().index);
  const bool s = w.sliced();
  const cuda::Nf4View view{w.packed.data<uint8_t>(),
                           s ? nullptr : w.absmax.data<uint8_t>(),
                           s ? nullptr : w.nested_absmax.data<float>(),
                           s ? nullptr : w.nested_code.data<float>(),
                           s ? nullptr : w.offset.data<float>(),
                           w.code.data<float>(),
                           s ? w.block_absmax.data<float>() : nullptr};
  cuda::launch_nf4_dequantize(out.dtype(), value_dtype, view, out.data_ptr(), out.numel(), cuda::stream_of(out));
}

}  // namespace

FSDP_REGISTER_DISPATCH(nf4_dequantize_stub, DeviceType::CUDA, &nf4_dequantize_cuda);

}  // namespace fsdp
