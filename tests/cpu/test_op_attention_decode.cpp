// Decode-time attention against a KV cache: fed a whole sequence at once, or in chunks
// down to one token at a time, it gives attention_forward's output (the training kernel,
// itself checked against a float64 softmax in test_op_attention.cpp); the cache receives
// exactly the new keys and values; the bits do not depend on the OpenMP thread count; and
// the front end refuses what the header rules out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fsdp/ops/attention.h"
#include "fsdp/ops/attention_decode.h"
#include "attention_inputs.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

using Shape = AttentionShape;

// Runs the sequence through attention_decode in chunks of the given sizes (summing to T)
// into fresh caches of S >= T positions; returns out [B, T, H, D] and leaves the caches.
Tensor decode_in_chunks(const Qkv& x, const Shape& s, const std::vector<int64_t>& chunks, int64_t S,
                        Tensor& k_cache, Tensor& v_cache) {
  const DType dt = x.q.dtype();
  k_cache = Tensor::zeros({s.B, s.KVH, S, s.D}, dt);
  v_cache = Tensor::zeros({s.B, s.KVH, S, s.D}, dt);
  Tensor out = Tensor::zeros({s.B, s.T, s.H, s.D}, dt);
  int64_t pos = 0;
  for (int64_t n : chunks) {
    attention_decode(x.q.narrow(1, pos, n), x.k.narrow(1, pos, n), x.v.narrow(1, pos, n), k_cache, v_cache, pos,
                     out.narrow(1, pos, n));
    pos += n;
  }
  EXPECT_EQ(pos, s.T);
  return out;
}

Tensor training_attention(const Qkv& x, const Shape& s) {
  Tensor out = Tensor::empty({s.B, s.T, s.H, s.D}, x.q.dtype());
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, stat_dtype(x.q.dtype()));
  attention_forward(x.q, x.k, x.v, out, lse);
  return out;
}

TEST(OpAttentionDecode, PrefillAndChunksEqualTrainingAttention) {
  const Shape shapes[] = {{1, 1, 1, 1, 8}, {2, 13, 6, 2, 8}, {1, 40, 4, 1, 16}, {2, 70, 4, 4, 32}};
  for (const Shape& s : shapes)
    for (DType dt : {DType::F32, DType::F64}) {
      const Qkv x = fused_qkv(s, dt, 11);
      const Tensor ref = training_attention(x, s);
      std::vector<std::vector<int64_t>> splits = {{s.T}, std::vector<int64_t>(size_t(s.T), 1)};
      if (s.T > 5) splits.push_back({1, 4, s.T - 5});
      if (s.T > 12) splits.push_back({s.T - 12, 5, 7});
      for (const auto& chunks : splits) {
        Tensor kc, vc;
        const Tensor out = decode_in_chunks(x, s, chunks, s.T + 3, kc, vc);
        // Both kernels sum T float32 products in different orders: ~1e-7 relative.
        EXPECT_LT(rel_error(out, ref), dt == DType::F64 ? 1e-13 : 1e-6)
            << "B=" << s.B << " T=" << s.T << " chunks=" << chunks.size() << " " << dtype_name(dt);
        // The cache holds the keys and values at their positions, bit for bit.
        for (int64_t b = 0; b < s.B; ++b)
          for (int64_t t = 0; t < s.T; ++t)
            for (int64_t g = 0; g < s.KVH; ++g)
              for (int64_t d = 0; d < s.D; ++d) {
                ASSERT_EQ(kc.get({b, g, t, d}), x.k.get({b, t, g, d}));
                ASSERT_EQ(vc.get({b, g, t, d}), x.v.get({b, t, g, d}));
              }
      }
    }
}

TEST(OpAttentionDecode, SameBitsForAnyThreadCount) {
  const Shape s{2, 150, 4, 2, 32};  // large enough for the parallel path
  const Qkv x = fused_qkv(s, DType::F32, 5);
  const auto outs = under_thread_counts([&] {
    Tensor kc, vc;
    return decode_in_chunks(x, s, {100, 49, 1}, s.T, kc, vc);
  });
  EXPECT_TRUE(same_bits(outs[0], outs[1]));
  EXPECT_TRUE(same_bits(outs[0], outs[2]));
}

TEST(OpAttentionDecode, RefusesBadArguments) {
  const Shape s{1, 4, 4, 2, 8};
  const Qkv x = fused_qkv(s, DType::F32, 3);
  Tensor kc = Tensor::zeros({1, 2, 6, 8}, DType::F32), vc = Tensor::zeros({1, 2, 6, 8}, DType::F32);
  Tensor out = Tensor::zeros({1, 4, 4, 8}, DType::F32);
  EXPECT_ERROR_MENTIONS(attention_decode(x.q, x.k, x.v, kc, vc, 3, out), "exceed the cache's 6 positions");
  EXPECT_ERROR_MENTIONS(attention_decode(x.q, x.k, x.v, kc, vc, -1, out), "pos must be >= 0");
  Tensor kc3 = Tensor::zeros({1, 3, 6, 8}, DType::F32);
  EXPECT_ERROR_MENTIONS(attention_decode(x.q, x.k, x.v, kc3, kc3, 0, out), "k_cache must have shape");
  Tensor kc64 = Tensor::zeros({1, 2, 6, 8}, DType::F64);
  EXPECT_ERROR_MENTIONS(attention_decode(x.q, x.k, x.v, kc64, kc64, 0, out), "k_cache");
  // A cache whose positions are not rows of D (the [B, S, KVH, D] layout) is refused.
  Tensor wrong = Tensor::zeros({1, 6, 2, 8}, DType::F32).transpose(1, 2);
  EXPECT_ERROR_MENTIONS(attention_decode(x.q, x.k, x.v, wrong, wrong, 0, out), "last two dims packed");
  const Qkv odd = fused_qkv({1, 4, 3, 2, 8}, DType::F32, 3);
  EXPECT_ERROR_MENTIONS(attention_decode(odd.q, odd.k, odd.v, kc, vc, 0, Tensor::zeros({1, 4, 3, 8}, DType::F32)),
                        "multiple of kv heads");
}

}  // namespace
}  // namespace fsdp::test
