// Rotary position embedding: tables against Hugging Face's inv_freq formula, forward
// against an explicit rotate-half loop, backward as the inverse rotation and against
// finite differences, positions restarting at each document of a packed row, and the front
// end's preconditions.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../common/document_layouts.h"
#include "fsdp/ops/rope.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

// Hugging Face LlamaRotaryEmbedding: inv_freq = 1 / theta^(arange(0, D, 2) / D),
// emb = cat(freqs, freqs), q_embed = q * cos + rotate_half(q) * sin with
// rotate_half(x) = cat(-x[half:], x[:half]). Written out here in double, per element.
Tensor reference(const Tensor& x, double theta, int64_t pos_offset) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  Tensor y = Tensor::empty(x.sizes(), DType::F64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const double inv_freq = 1.0 / std::pow(theta, double(2 * (d % half)) / double(D));
          const double angle = double(pos_offset + t) * inv_freq;
          const double rot = d < half ? -x.get({b, t, h, d + half}) : x.get({b, t, h, d - half});
          y.set({b, t, h, d}, x.get({b, t, h, d}) * std::cos(angle) + rot * std::sin(angle));
        }
  return y;
}

TEST(OpRope, TablesMatchHuggingFaceInvFreq) {
  const int64_t P = 4096, D = 128;
  const double theta = 10000.0;
  RopeTables tb = make_rope_tables(P, D, theta);
  ASSERT_EQ(tb.cos.sizes(), (Dims{P, D / 2}));
  ASSERT_EQ(tb.cos.dtype(), DType::F32);
  double worst = 0;
  for (int64_t p : {int64_t(0), int64_t(1), int64_t(17), int64_t(1000), P - 1})
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = double(p) * (1.0 / std::pow(theta, double(2 * i) / double(D)));
      // Rounded once from double: within half a float ulp of the true value (<= 2^-25 for |v| <= 1).
      worst = std::max(worst, std::abs(tb.cos.get({p, i}) - std::cos(angle)));
      worst = std::max(worst, std::abs(tb.sin.get({p, i}) - std::sin(angle)));
    }
  EXPECT_LE(worst, std::ldexp(1.0, -25));
  EXPECT_EQ(tb.cos.get({0, 5}), 1.0);
  EXPECT_EQ(tb.sin.get({0, 5}), 0.0);
}

TEST(OpRope, ForwardMatchesRotateHalfReference) {
  struct Case {
    int64_t B, T, H, D, offset;
  };
  for (const Case& c : {Case{1, 1, 1, 2, 0}, Case{2, 7, 3, 8, 0}, Case{3, 5, 2, 16, 11}, Case{1, 33, 4, 6, 100}})
    for (DType dt : {DType::F32, DType::F64}) {
      const double theta = 10000.0;
      RopeTables tb = make_rope_tables(c.offset + c.T + 3, c.D, theta);
      Tensor x = random_tensor({c.B, c.T, c.H, c.D}, dt, 1);
      Tensor y = Tensor::empty(x.sizes(), dt);
      rope_forward(x, y, tb, c.offset);
      // Tables hold float32 cos/sin (error <= 2^-25 each), so even float64 inputs match
      // the double reference only to ~1e-7 relative.
      EXPECT_LT(rel_error(y, reference(x, theta, c.offset)), 2e-7)
          << dtype_name(dt) << " B=" << c.B << " T=" << c.T << " H=" << c.H << " D=" << c.D;
    }
}

TEST(OpRope, StridedViewsOfFusedQkvAndInPlace) {
  // q and k as views of a fused [B, T, (H + 2 KVH) * D] projection, rotated in place,
  // exactly as the model does; v must stay untouched.
  const int64_t B = 2, T = 9, H = 4, KVH = 2, D = 8;
  const double theta = 500000.0;
  RopeTables tb = make_rope_tables(64, D, theta);
  Tensor fused = random_tensor({B, T, (H + 2 * KVH) * D}, DType::F32, 5);
  Tensor heads = fused.reshape({B, T, H + 2 * KVH, D});
  Tensor q = heads.narrow(2, 0, H), k = heads.narrow(2, H, KVH), v = heads.narrow(2, H + KVH, KVH);
  ASSERT_FALSE(q.is_contiguous());
  const Tensor q_expect = reference(q, theta, 3), k_expect = reference(k, theta, 3), v_before = v.clone();
  rope_forward(q, q, tb, 3);
  rope_forward(k, k, tb, 3);
  EXPECT_LT(rel_error(q, q_expect), 2e-7);
  EXPECT_LT(rel_error(k, k_expect), 2e-7);
  EXPECT_EQ(rel_error(v, v_before), 0.0);
  // Out of place into a view of another fused buffer gives the same bits as in place.
  Tensor fused2 = random_tensor({B, T, (H + 2 * KVH) * D}, DType::F32, 6);
  Tensor q_src = fused2.reshape({B, T, H + 2 * KVH, D}).narrow(2, 0, H);
  Tensor q_out = Tensor::empty({B, T, H, D}, DType::F32);
  Tensor q_in_place = q_src.clone();
  rope_forward(q_src, q_out, tb, 0);
  rope_forward(q_in_place, q_in_place, tb, 0);
  for (int64_t i = 0; i < q_out.numel(); ++i) ASSERT_EQ(q_out.get_flat(i), q_in_place.get_flat(i));
}

TEST(OpRope, BackwardIsInverseRotation) {
  const int64_t B = 2, T = 13, H = 3, D = 16;
  RopeTables tb = make_rope_tables(40, D, 10000.0);
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = random_tensor({B, T, H, D}, dt, 7);
    Tensor y = Tensor::empty(x.sizes(), dt), back = Tensor::empty(x.sizes(), dt);
    rope_forward(x, y, tb, 5);
    rope_backward(y, back, tb, 5);
    // The table's cos^2 + sin^2 is 1 only to ~2^-24, so the round trip is the identity to
    // that precision, in float64 as in float32 (plus float32's own rounding, ~1e-7).
    EXPECT_LT(rel_error(back, x), dt == DType::F32 ? 3e-7 : 1e-7) << dtype_name(dt);
  }
}

// L = sum(W * rope(x)); dL/dx = rope_backward(W). Rotation is linear in x, so central
// differences are exact up to rounding (~1e-16 / h = 1e-10); 1e-8 catches any sign or
// half-swap error, which would give O(1).
TEST(OpRope, BackwardMatchesFiniteDifferences) {
  struct Case {
    int64_t B, T, H, D, offset;
  };
  for (const Case& c : {Case{1, 3, 1, 2, 0}, Case{2, 5, 3, 6, 7}, Case{1, 4, 2, 16, 1}})
    for (bool in_place : {false, true}) {
      RopeTables tb = make_rope_tables(c.offset + c.T, c.D, 10000.0);
      Tensor x = random_tensor({c.B, c.T, c.H, c.D}, DType::F64, 11);
      Tensor w = random_tensor(x.sizes(), DType::F64, 12);
      auto loss = [&] {
        Tensor y = x.clone();  // in place on a copy, or out of place from x
        if (in_place) rope_forward(y, y, tb, c.offset);
        else rope_forward(x, y, tb, c.offset);
        return weighted_sum(y, w);
      };
      Tensor dx = w.clone();
      if (in_place) rope_backward(dx, dx, tb, c.offset);
      else rope_backward(w, dx, tb, c.offset);
      EXPECT_LT(fd_rel_error(loss, x, dx), 1e-8) << "D=" << c.D << " in_place=" << in_place;
    }
}

// With documents (Note [Document masking] in fsdp/ops/attention.h) token t of a row is at
// position t - doc_start[t]: each document rotated as if it began the row, bit for bit, and
// the backward rotates back the same way. (Attention alone cannot tell: q.k depends only on
// the positions' difference, so the model-level tests would pass with positions running on.)
TEST(OpRope, PositionsRestartAtEachDocument) {
  const DocumentLayout layout{12, {{0, 1, 5}, {0, 7, 11}}};
  const RopeTables tables = make_rope_tables(16, 6, 1e4);
  for (bool inverse : {false, true}) {
    const Tensor x = random_tensor({2, 12, 3, 6}, DType::F32, inverse ? 8 : 7);
    Tensor y = Tensor::empty(x.sizes(), DType::F32);
    (inverse ? rope_backward : rope_forward)(x, y, tables, 0, layout.doc_start());
    for (int64_t b = 0; b < 2; ++b) {
      const auto& starts = layout.starts[size_t(b)];
      for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t a = starts[d], n = (d + 1 < starts.size() ? starts[d + 1] : 12) - a;
        const Tensor part = x.narrow(0, b, 1).narrow(1, a, n).clone();
        Tensor want = Tensor::empty(part.sizes(), DType::F32);
        (inverse ? rope_backward : rope_forward)(part, want, tables, 0, Tensor());
        EXPECT_TRUE(same_bits(y.narrow(0, b, 1).narrow(1, a, n).clone(), want)) << "row " << b << " document " << d;
      }
    }
  }
  const Tensor x = random_tensor({2, 12, 3, 6}, DType::F32, 9);
  EXPECT_ERROR_MENTIONS(rope_forward(x, x, tables, 0, Tensor::zeros({2, 11}, DType::I32)),
                        "doc_start must have shape [2, 12]");
  Tensor bad = layout.doc_start();
  bad.at<int32_t>({0, 3}) = 2;
  EXPECT_ERROR_MENTIONS(rope_forward(x, x, tables, 0, bad), "doc_start[0, 3] = 2");
}

TEST(OpRope, BadInputIsRejectedWithClearMessage) {
  RopeTables tb = make_rope_tables(16, 8, 10000.0);
  Tensor x = random_tensor({2, 4, 3, 8}, DType::F32, 20);
  Tensor y = Tensor::empty(x.sizes(), DType::F32);
  EXPECT_ERROR_MENTIONS(rope_forward(x, Tensor::empty({2, 4, 3, 6}, DType::F32), tb, 0), "y must have shape");
  EXPECT_ERROR_MENTIONS(rope_forward(x, y.to(DType::F64), tb, 0), "y (float64");
  EXPECT_ERROR_MENTIONS(rope_backward(x, y.to(DType::F64), tb, 0), "dx (float64");
  EXPECT_ERROR_MENTIONS(rope_forward(x, y, tb, 13), "pos_offset + T = 13 + 4 exceed the 16 rows");
  EXPECT_ERROR_MENTIONS(rope_forward(x, y, tb, -1), "pos_offset must be >= 0");
  EXPECT_ERROR_MENTIONS(rope_forward(random_tensor({2, 4, 3, 6}, DType::F32, 21),
                                     Tensor::empty({2, 4, 3, 6}, DType::F32), tb, 0),
                        "tables.cos has 4 frequencies but x has head dim 6");
  EXPECT_ERROR_MENTIONS(rope_forward(random_tensor({1, 2, 1, 5}, DType::F32, 22),
                                     Tensor::empty({1, 2, 1, 5}, DType::F32), tb, 0),
                        "head dim of x must be even");
  EXPECT_ERROR_MENTIONS(rope_forward(random_tensor({4, 3, 8}, DType::F32, 23), y, tb, 0),
                        "x must have 4 dimensions");
  // Non-packed layout: heads and head dim swapped by a transpose.
  Tensor xt = random_tensor({2, 4, 8, 3}, DType::F32, 24).transpose(2, 3);
  EXPECT_ERROR_MENTIONS(rope_forward(xt, y, tb, 0), "x must have its last two dims packed");
  EXPECT_ERROR_MENTIONS(rope_backward(x, Tensor::empty({2, 3, 4, 8}, DType::F32).transpose(1, 2), tb, 0), "dx must have its last two dims packed");
  RopeTables bad = tb;
  bad.sin = Tensor::empty({16, 4}, DType::F64);
  EXPECT_ERROR_MENTIONS(rope_forward(x, y, bad, 0), "tables.sin must be float32");
  bad.sin = Tensor::empty({15, 4}, DType::F32);
  EXPECT_ERROR_MENTIONS(rope_forward(x, y, bad, 0), "tables.sin must have shape [16, 4]");
  EXPECT_ERROR_MENTIONS(make_rope_tables(16, 7, 10000.0), "head_dim must be positive and even");
  EXPECT_ERROR_MENTIONS(make_rope_tables(16, 8, 0.0), "theta must be positive");
  EXPECT_ERROR_MENTIONS(rope_forward(Tensor(), y, tb, 0), "x is an undefined tensor");
}

}  // namespace
}  // namespace fsdp::test
