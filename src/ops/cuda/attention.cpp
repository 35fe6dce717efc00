// The CUDA causal GQA attention (fsdp/ops/attention.h) registered into its dispatch stubs:
// the front end validated shapes, dtypes, devices and layouts; this side hands pointers
// and strides to attention.cu.
#include "attention.cuh"

#include "fsdp/ops/attention.h"
#include "launch_args.h"

namespace fsdp {
namespace {

// The kernels' doc_start (attention.cuh): the front end checked its shape and device.
const int32_t* doc_starts(const Tensor& doc_start) {
  return doc_start.defined() ? doc_start.data<int32_t>() : nullptr;
}

void check_supported(const char* op, const Tensor& q) {
  FSDP_CHECK(cuda::attention_supports(q.dtype(), q.size(3)),
             "{}: the CUDA backend implements float32, float64, bfloat16 and float16 with head dim <= {}, got q {}", op,
             cuda::kAttentionMaxHeadDim, q.str());
}

void attention_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const Tensor& doc_start) {
  check_supported("attention_forward", q);
  cuda::DeviceGuard guard(q.device().index);
  const cuda::AttentionFwdArgs a{cuda::heads(q), cuda::heads(k), cuda::heads(v), cuda::heads(out), lse.data_ptr(),
                                 q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), 0, doc_starts(doc_start)};
  cuda::launch_attention_forward(q.dtype(), a, cuda::stream_of(q));
}

void attention_backward_cuda(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const Tensor& doc_start) {
  check_supported("attention_backward", q);
  cuda::DeviceGuard guard(q.device().index);
  const cuda::AttentionBwdArgs a{cuda::heads(dout), cuda::heads(q),  cuda::heads(k),  cuda::heads(v),
                                 cuda::heads(out),  cuda::heads(dq), cuda::heads(dk), cuda::heads(dv),
                                 lse.data_ptr(), q.size(0), q.size(1), q.size(2), k.size(2), q.size(3),
                                 doc_starts(doc_start)};
  cuda::launch_attention_backward(q.dtype(), a, cuda::stream_of(q));
}

}  // namespace

FSDP_REGISTER_DISPATCH(attention_forward_stub, DeviceType::CUDA, &attention_forward_cuda);
FSDP_REGISTER_DISPATCH(attention_backward_stub, DeviceType::CUDA, &attention_backward_cuda);

}  // namespace fsdp
