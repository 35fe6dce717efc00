// Front end of causal GQA attention: every precondition is checked here, once for all
// backends, so a backend may assume the shapes, dtypes and layouts of
// include/fsdp/ops/attention.h.
#include "fsdp/ops/attention.h"

#include <algorithm>

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

// doc_start, when given: int32 [B, T] contiguous on q's device, its invariant checked
// when it is on the host (Note [Document masking]).
void check_doc_start_for(const Tensor& doc_start, const Tensor& q) {
  if (!doc_start.defined()) return;
  check_dtype(doc_start, DType::I32, "doc_start");
  check_shape(doc_start, Dims{q.size(0), q.size(1)}, "doc_start");
  check_contiguous(doc_start, "doc_start");
  check_same_device(q, doc_start, "q", "doc_start");
  if (doc_start.device().is_cpu()) check_doc_start(doc_start, "doc_start");
}

}  // namespace

Tensor make_doc_start(std::span<const int32_t> starts, std::span<const int64_t> first, int64_t T) {
  FSDP_CHECK(!first.empty() && first.front() == 0 && size_t(first.back()) == starts.size(),
             "make_doc_start: row offsets must run from 0 to the {} document starts, got {} rows", starts.size(),
             int64_t(first.size()) - 1);
  const int64_t B = int64_t(first.size()) - 1;
  Tensor t = Tensor::empty({B, T}, DType::I32);
  int32_t* d = t.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t f = first[size_t(b)], l = first[size_t(b) + 1];
    FSDP_CHECK(f < l && starts[size_t(f)] == 0, "make_doc_start: row {}'s documents must start at 0", b);
    for (int64_t k = f; k < l; ++k) {
      const int64_t s = starts[size_t(k)], e = k + 1 < l ? int64_t(starts[size_t(k) + 1]) : T;
      FSDP_CHECK(s < e && e <= T, "make_doc_start: row {}'s document starts must increase within [0, {}), got {} then {}",
                 b, T, s, e);
      std::fill(d + b * T + s, d + b * T + e, int32_t(s));
    }
  }
  return t;
}

void check_doc_start(const Tensor& doc_start, const char* what) {
  FSDP_CHECK(doc_start.dtype() == DType::I32 && doc_start.dim() == 2 && doc_start.is_contiguous() &&
                 doc_start.device().is_cpu(),
             "{} must be a contiguous host int32 [B, T] tensor, got {}", what, doc_start.str());
  const int64_t B = doc_start.size(0), T = doc_start.size(1);
  const int32_t* d = doc_start.data<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t s = d[b * T + t];
      FSDP_CHECK(s == t || (t > 0 && s == d[b * T + t - 1]),
                 "{}[{}, {}] = {}: a token's document must start at the token itself or where the previous token's "
                 "does (Note [Document masking] in fsdp/ops/attention.h)",
                 what, b, t, s);
    }
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& doc_start) {
  check_qkv_lse(q, k, v, lse);
  check_like(out, q, "out", "q");
  check_doc_start_for(doc_start, q);
  if (q.numel() == 0) return;
  attention_forward_stub(q.device(), q, k, v, out, lse, doc_start);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& doc_start) {
  check_qkv_lse(q, k, v, lse);
  check_like(out, q, "out", "q");
  check_like(dout, q, "dout", "q");
  check_like(dq, q, "dq", "q");
  check_like(dk, k, "dk", "k");
  check_like(dv, v, "dv", "v");
  check_doc_start_for(doc_start, q);
  if (q.numel() == 0) return;  // B == 0 or T == 0: dk and dv are empty too
  attention_backward_stub(q.device(), dout, q, k, v, out, lse, dq, dk, dv, doc_start);
}

}  // namespace fsdp
