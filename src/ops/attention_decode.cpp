// Front end of decode-time attention against a KV cache: every precondition of
// include/fsdp/ops/attention_decode.h is checked here, once for all backends.
#include "fsdp/ops/attention_decode.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(attention_decode_stub);

namespace {

using detail::check_heads_packed;

void check_like(const Tensor& t, const Tensor& like, const char* what, const char* like_name) {
  check_heads_packed(t, "attention_decode", what);
  check_same_dtype(like, t, like_name, what);
  check_same_device(like, t, like_name, what);
  check_shape(t, like.sizes(), what);
}

}  // namespace

void attention_decode(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                      const Tensor& v_cache, int64_t pos, const Tensor& out) {
  check_heads_packed(q, "attention_decode", "q");
  detail::check_floating(q, "q", "attention_decode");
  check_like(out, q, "out", "q");
  check_heads_packed(k_new, "attention_decode", "k_new");
  check_same_dtype(q, k_new, "q", "k_new");
  check_same_device(q, k_new, "q", "k_new");
  check_like(v_new, k_new, "v_new", "k_new");
  // The cache is [B, KVH, S, D]: the same "last two dims packed" rule, read as (S, D).
  check_heads_packed(k_cache, "attention_decode", "k_cache");
  check_same_dtype(q, k_cache, "q", "k_cache");
  check_same_device(q, k_cache, "q", "k_cache");
  check_like(v_cache, k_cache, "v_cache", "k_cache");

  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KVH = k_new.size(2);
  FSDP_CHECK(D > 0, "attention_decode: head dim of q must be positive, got {}", q.str());
  FSDP_CHECK(H > 0 && KVH > 0 && H % KVH == 0,
             "attention_decode: query heads H = {} (q) must be a positive multiple of kv heads KVH = {} (k_new)", H,
             KVH);
  check_shape(k_new, Dims{B, T, KVH, D}, "k_new");
  const int64_t S = k_cache.size(2);
  FSDP_CHECK(k_cache.size(0) == B && k_cache.size(1) == KVH && k_cache.size(3) == D,
             "attention_decode: k_cache must have shape [B, KVH, S, D] = [{}, {}, S, {}], got {}", B, KVH, D,
             k_cache.str());
  FSDP_CHECK(pos >= 0, "attention_decode: pos must be >= 0, got {}", pos);
  FSDP_CHECK(pos + T <= S, "attention_decode: positions pos + T = {} + {} exceed the cache's {} positions", pos, T,
             S);
  if (q.numel() == 0) return;
  attention_decode_stub(q.device(), q, k_new, v_new, k_cache, v_cache, pos, out);
}

}  // namespace fsdp
