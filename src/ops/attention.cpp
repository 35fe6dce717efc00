// Front end of causal GQA attention: every precondition is checked here, once for all
// backends, so a backend may assume the shapes, dtypes and layouts of
// include/fsdp/ops/attention.h.
#include "fsdp/ops/attention.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(attention_forward_stub);
FSDP_DEFINE_DISPATCH(attention_backward_stub);

namespace {

using detail::check_heads_packed;

// Checks q, k, v and lse; returns nothing but guarantees: q [B,T,H,D], k and v
// [B,T,KVH,D], KVH >= 1, H % KVH == 0, lse [B,H,T] contiguous of the right dtype.
void check_qkv_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse) {
  // q, k, v: views of one fused [B, T, (H + 2*KVH) * D] projection buffer.
  check_heads_packed(q, "attention", "q");
  check_heads_packed(k, "attention", "k");
  check_heads_packed(v, "attention", "v");
  detail::check_floating(q, "q", "attention");
  check_same_dtype(q, k, "q", "k");
  check_same_dtype(q, v, "q", "v");
  check_same_device(q, k, "q", "k");
  check_same_device(q, v, "q", "v");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KVH = k.size(2);
  FSDP_CHECK(D > 0, "attention: head dim of q must be positive, got {}", q.str());
  FSDP_CHECK(k.size(0) == B && k.size(1) == T && k.size(3) == D,
             "attention: k must have shape [B, T, KVH, D] = [{}, {}, KVH, {}] to match q {}, got {}", B, T, D,
             q.sizes().str(), k.str());
  FSDP_CHECK(H > 0, "attention: q must have at least one head, got {}", q.str());
  FSDP_CHECK(KVH > 0, "attention: k must have at least one kv head, got {}", k.str());
  FSDP_CHECK(H % KVH == 0, "attention: number of query heads H = {} (q) must be a multiple of kv heads KVH = {} (k)",
             H, KVH);
  check_shape(v, k.sizes(), "v");
  check_dtype(lse, stat_dtype(q.dtype()), "lse");
  check_shape(lse, Dims{B, H, T}, "lse");
  check_contiguous(lse, "lse");
  check_same_device(q, lse, "q", "lse");
}

// An output or gradient shaped like `like`, same dtype, device and layout rules.
void check_like(const Tensor& t, const Tensor& like, const char* what, const char* like_name) {
  check_heads_packed(t, "attention", what);
  check_same_dtype(like, t, like_name, what);
  check_same_device(like, t, like_name, what);
  check_shape(t, like.sizes(), what);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  check_qkv_lse(q, k, v, lse);
  check_like(out, q, "out", "q");
  if (q.numel() == 0) return;
  attention_forward_stub(q.device(), q, k, v, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  check_qkv_lse(q, k, v, lse);
  check_like(out, q, "out", "q");
  check_like(dout, q, "dout", "q");
  check_like(dq, q, "dq", "q");
  check_like(dk, k, "dk", "k");
  check_like(dv, v, "dv", "v");
  if (q.numel() == 0) return;  // B == 0 or T == 0: dk and dv are empty too
  attention_backward_stub(q.device(), dout, q, k, v, out, lse, dq, dk, dv);
}

}  // namespace fsdp
