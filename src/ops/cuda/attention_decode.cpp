// The CUDA decode-time attention (fsdp/ops/attention_decode.h) registered into its dispatch
// stub: the front end validated shapes, dtypes, devices, layouts and pos + T <= S; this side
// hands pointers and strides to attention_decode.cu.
#include "attention_decode.cuh"

#include "fsdp/ops/attention_decode.h"
#include "launch_args.h"

namespace fsdp {
namespace {

// A [B, KVH, S, D] cache read as keys (b, position, kv head).
cuda::HeadsView cache(const Tensor& t) { return cuda::HeadsView{t.data_ptr(), t.stride(0), t.stride(2), t.stride(1)}; }

void attention_decode_cuda(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                           const Tensor& v_cache, int64_t pos, const Tensor& out) {
  FSDP_CHECK(cuda::attention_supports(q.dtype(), q.size(3)),
             "attention_decode: the CUDA backend implements float32, float64, bfloat16 and float16 with head dim "
             "<= {}, got q {}",
             cuda::kAttentionMaxHeadDim, q.str());
  cuda::DeviceGuard guard(q.device().index);
  const cuda::DecodeArgs a{cuda::heads(q),   cuda::heads(k_new), cuda::heads(v_new), cache(k_cache), cache(v_cache),
                           cuda::heads(out), q.size(0),          q.size(1),          q.size(2),      k_new.size(2),
                           q.size(3),        pos};
  cuda::launch_attention_decode(q.dtype(), a, cuda::stream_of(q));
}

}  // namespace

FSDP_REGISTER_DISPATCH(attention_decode_stub, DeviceType::CUDA, &attention_decode_cuda);

}  // namespace fsdp
