// Causal GQA attention: forward against an explicit double-precision softmax with
// repeat_kv, backward against central finite differences, bitwise independence of the
// OpenMP thread count, and the front end's preconditions. q, k, v are cut from one fused
// [B, T, (H + 2 KVH) * D] projection buffer, exactly as the model passes them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fsdp/ops/attention.h"
#include "attention_inputs.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

using Shape = AttentionShape;

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " KVH=" + std::to_string(s.KVH) + " D=" + std::to_string(s.D);
}

// The textbook definition in double: repeat_kv (query head h reads kv head h / (H/KVH)),
// scores / sqrt(D), causal mask, softmax, weighted sum of v.
void reference(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), KVH = k.size(2);
  out = Tensor::empty({B, T, H, D}, DType::F64);
  lse = Tensor::empty({B, H, T}, DType::F64);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KVH);
      for (int64_t i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dotp = 0;
          for (int64_t d = 0; d < D; ++d) dotp += q.get({b, i, h, d}) * k.get({b, j, kvh, d});
          s[j] = dotp * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - m);
        lse.set({b, h, i}, m + std::log(l));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += std::exp(s[j] - m) / l * v.get({b, j, kvh, d});
          out.set({b, i, h, d}, o);
        }
      }
    }
}

const Shape kForwardShapes[] = {
    {1, 1, 1, 1, 8},     // a single token
    {2, 7, 4, 4, 8},     // MHA, odd T
    {3, 5, 4, 1, 16},    // MQA
    {2, 13, 6, 2, 6},    // GQA 3:1, D = 6
    {1, 150, 4, 2, 64},  // three query blocks, three key tiles of 64
    {2, 97, 2, 1, 128},  // D = 128: key tiles of 32, a partial last query block
};

TEST(OpAttention, ForwardMatchesReference) {
  uint64_t seed = 1;
  for (const Shape& s : kForwardShapes)
    for (DType dt : {DType::F32, DType::F64}) {
      Qkv in = fused_qkv(s, dt, ++seed);
      // out as a view too (a wider buffer), to exercise its row stride.
      Tensor out_wide = Tensor::empty({s.B, s.T, s.H + 1, s.D}, dt);
      Tensor out = out_wide.narrow(2, 1, s.H);
      Tensor lse = Tensor::empty({s.B, s.H, s.T}, stat_dtype(dt));
      attention_forward(in.q, in.k, in.v, out, lse);
      Tensor out_ref, lse_ref;
      reference(in.q, in.k, in.v, out_ref, lse_ref);
      // float32: inputs in [-1, 1), scores rounded after D products, exp within ~2 ulp,
      // sums of <= 150 terms: a few 1e-7 norm-wise; 2e-6 leaves margin but would catch a
      // missing scale, mask or kv-head mapping (errors of O(1)).
      const double tol = dt == DType::F32 ? 2e-6 : 1e-12;
      EXPECT_LT(rel_error(out, out_ref), tol) << describe(s) << " " << dtype_name(dt);
      EXPECT_LT(rel_error(lse, lse_ref), tol) << describe(s) << " " << dtype_name(dt);
    }
}

// Runs forward and backward for L = sum(W * out) and returns the analytic gradients.
struct Grads {
  Tensor out, lse, dq, dk, dv;
};
Grads forward_backward(const Qkv& in, const Tensor& w, bool nan_fill = false) {
  const Tensor& q = in.q;
  const DType dt = q.dtype();
  Grads g;
  g.out = Tensor::empty(q.sizes(), dt);
  g.lse = Tensor::empty({q.size(0), q.size(2), q.size(1)}, stat_dtype(dt));
  attention_forward(in.q, in.k, in.v, g.out, g.lse);
  // Gradients as views of one fused dqkv buffer, the way the model passes them.
  Tensor dfused = Tensor::empty(in.fused.sizes(), dt);
  if (nan_fill) dfused.fill_(std::numeric_limits<double>::quiet_NaN());
  const int64_t H = q.size(2), KVH = in.k.size(2);
  Tensor heads = dfused.reshape({q.size(0), q.size(1), H + 2 * KVH, q.size(3)});
  g.dq = heads.narrow(2, 0, H);
  g.dk = heads.narrow(2, H, KVH);
  g.dv = heads.narrow(2, H + KVH, KVH);
  attention_backward(w, in.q, in.k, in.v, g.out, g.lse, g.dq, g.dk, g.dv);
  return g;
}

// Central differences in float64 with h = 1e-4: attention is smooth, so the truncation
// error O(h^2) stays near 1e-10 relative and the loss's rounding noise divided by h near
// 1e-9 (measured errors <= 1.3e-9). The bound 1e-7 keeps that margin, while a wrong term
// (a missing delta, scale or mask) gives errors of O(1e-2) or more.
TEST(OpAttention, BackwardMatchesFiniteDifferences) {
  const Shape shapes[] = {
      {1, 3, 2, 1, 6}, {2, 5, 3, 3, 4}, {1, 7, 6, 2, 5}, {2, 4, 4, 1, 8},
      {1, 70, 2, 1, 8},   // two query blocks
      {1, 70, 2, 2, 64},  // two query blocks and two key tiles
  };
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    Qkv in = fused_qkv(s, DType::F64, ++seed);
    Tensor w = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, ++seed);
    const Grads g = forward_backward(in, w);
    auto loss = [&] {
      Tensor out = Tensor::empty(in.q.sizes(), DType::F64);
      Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F64);
      attention_forward(in.q, in.k, in.v, out, lse);
      return weighted_sum(out, w);
    };
    EXPECT_LT(fd_rel_error(loss, in.q, g.dq, 1e-4, 64), 1e-7) << "dq " << describe(s);
    EXPECT_LT(fd_rel_error(loss, in.k, g.dk, 1e-4, 64), 1e-7) << "dk " << describe(s);
    EXPECT_LT(fd_rel_error(loss, in.v, g.dv, 1e-4, 64), 1e-7) << "dv " << describe(s);
  }
}

TEST(OpAttention, Float32BackwardAgreesWithFloat64) {
  for (const Shape& s : {Shape{2, 37, 6, 2, 16}, Shape{1, 150, 4, 2, 64}, Shape{1, 70, 2, 1, 128}}) {
    Qkv in64 = fused_qkv(s, DType::F64, 200);
    Tensor w64 = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, 201);
    Qkv in32 = fused_qkv(s, DType::F32, 200);  // same seed: the float32 rounding of in64
    in32.fused.copy_(in64.fused);
    const Grads g64 = forward_backward(in64, w64);
    // dq, dk, dv start as NaN: backward must overwrite, never accumulate into, them.
    const Grads g32 = forward_backward(in32, w64.to(DType::F32), /*nan_fill=*/true);
    // Float32 inputs differ from the float64 ones by 2^-24 relative, and the gradients
    // sum O(T) float terms: ~1e-6 norm-wise. 1e-5 for margin.
    EXPECT_LT(rel_error(g32.dq, g64.dq), 1e-5) << describe(s);
    EXPECT_LT(rel_error(g32.dk, g64.dk), 1e-5) << describe(s);
    EXPECT_LT(rel_error(g32.dv, g64.dv), 1e-5) << describe(s);
  }
}

// Resumed runs must be bit-identical, so the bits may not depend on how many threads
// share the work.
TEST(OpAttention, BitwiseIndependentOfThreadCount) {
  const Shape s{2, 150, 6, 2, 64};
  Qkv in = fused_qkv(s, DType::F32, 300);
  Tensor w = random_tensor({s.B, s.T, s.H, s.D}, DType::F32, 301);
  const std::vector<Grads> runs = under_thread_counts([&] { return forward_backward(in, w); });
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_TRUE(same_bits(runs[0].out, runs[r].out)) << "out, run " << r;
    EXPECT_TRUE(same_bits(runs[0].lse, runs[r].lse)) << "lse, run " << r;
    EXPECT_TRUE(same_bits(runs[0].dq, runs[r].dq)) << "dq, run " << r;
    EXPECT_TRUE(same_bits(runs[0].dk, runs[r].dk)) << "dk, run " << r;
    EXPECT_TRUE(same_bits(runs[0].dv, runs[r].dv)) << "dv, run " << r;
  }
}

TEST(OpAttention, BadInputIsRejectedWithClearMessage) {
  const Shape s{2, 5, 6, 2, 8};
  Qkv in = fused_qkv(s, DType::F32, 400);
  Tensor out = Tensor::empty(in.q.sizes(), DType::F32);
  Tensor lse = Tensor::empty({s.B, s.H, s.T}, DType::F32);
  Tensor k_short = random_tensor({s.B, s.T - 1, s.KVH, s.D}, DType::F32, 401);
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, k_short, in.v, out, lse), "k must have shape [B, T, KVH, D]");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v.clone().narrow(1, 0, 4), out, lse), "v must have shape");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v.to(DType::F64), out, lse), "v (float64");
  Tensor k4 = random_tensor({s.B, s.T, 4, s.D}, DType::F32, 402);
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, k4, k4, out, lse), "H = 6 (q) must be a multiple of kv heads KVH = 4");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, Tensor::empty({s.B, s.T, s.H}, DType::F32)),
                        "lse must have shape [2, 6, 5]");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, Tensor::empty({s.B, s.H, s.T}, DType::F64)),
                        "lse must be float32");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, Tensor::empty({s.B, s.T, s.H, 4}, DType::F32), lse),
                        "out must have shape");
  // Non-packed layout: [B, H, T, D] storage transposed to [B, T, H, D] has stride(2) = T*D.
  Tensor q_bhtd = random_tensor({s.B, s.H, s.T, s.D}, DType::F32, 403).transpose(1, 2);
  EXPECT_ERROR_MENTIONS(attention_forward(q_bhtd, in.k, in.v, out, lse), "q must have its last two dims packed");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q, in.k, in.v, out, Tensor::empty({s.B, s.T, s.H}, DType::F32).transpose(1, 2)),
                        "lse must be contiguous");
  EXPECT_ERROR_MENTIONS(attention_forward(in.q.select(0, 0), in.k, in.v, out, lse), "q must have 4 dimensions");

  Tensor w = random_tensor(in.q.sizes(), DType::F32, 404);
  attention_forward(in.q, in.k, in.v, out, lse);
  Tensor dq = Tensor::empty(in.q.sizes(), DType::F32), dk = Tensor::empty(in.k.sizes(), DType::F32);
  Tensor dv = Tensor::empty(in.v.sizes(), DType::F32);
  EXPECT_NO_THROW(attention_backward(w, in.q, in.k, in.v, out, lse, dq, dk, dv));
  EXPECT_ERROR_MENTIONS(attention_backward(w, in.q, in.k, in.v, out, lse, dq, dq, dv), "dk must have shape");
  EXPECT_ERROR_MENTIONS(attention_backward(w.to(DType::F64), in.q, in.k, in.v, out, lse, dq, dk, dv), "dout (float64");
  EXPECT_ERROR_MENTIONS(attention_backward(w, in.q, in.k, in.v, out, lse.narrow(2, 0, 4), dq, dk, dv),
                        "lse must have shape");
  EXPECT_ERROR_MENTIONS(attention_backward(w, in.q, in.k, in.v, out, lse, dq, dk, Tensor()), "dv is an undefined tensor");
  EXPECT_ERROR_MENTIONS(
      attention_backward(w, in.q, in.k, in.v, out, lse, random_tensor({s.B, s.H, s.T, s.D}, DType::F32, 405).transpose(1, 2), dk, dv),
      "dq must have its last two dims packed");
}

}  // namespace
}  // namespace fsdp::test
