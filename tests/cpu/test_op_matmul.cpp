// matmul: c = alpha * op(a) @ op(b) + beta * c against a naive double-precision loop, its
// gradients against central finite differences, and every precondition of the front end.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fsdp/ops/matmul.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

// op(x)[i, j] for a 2-D tensor of any dtype and strides.
double op_at(const Tensor& x, bool trans, int64_t i, int64_t j) { return trans ? x.get({j, i}) : x.get({i, j}); }

// Naive reference in double: alpha * op(a) @ op(b) + beta * c0 (c0 read before c is written).
Tensor reference(const Tensor& a, const Tensor& b, const Tensor& c0, bool ta, bool tb, double alpha, double beta) {
  const int64_t m = c0.size(0), n = c0.size(1), k = ta ? a.size(0) : a.size(1);
  Tensor r = Tensor::empty({m, n}, DType::F64);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += op_at(a, ta, i, p) * op_at(b, tb, p, j);
      r.set({i, j}, alpha * s + (beta == 0 ? 0.0 : beta * c0.get({i, j})));
    }
  return r;
}

// A [rows, cols] view with packed rows and row stride cols + pad, cut from a wider buffer
// the way q/k/v or gate/up are cut from a fused projection.
Tensor strided_view(int64_t rows, int64_t cols, int64_t pad, DType dt, uint64_t seed) {
  Tensor wide = random_tensor({rows, cols + pad}, dt, seed);
  return wide.narrow(1, pad / 2, cols);
}

// Shapes of op(a) = [m, k], op(b) = [k, n] for the stored operands.
Dims a_shape(int64_t m, int64_t k, bool ta) { return ta ? Dims{k, m} : Dims{m, k}; }
Dims b_shape(int64_t k, int64_t n, bool tb) { return tb ? Dims{n, k} : Dims{k, n}; }

TEST(OpMatmul, AllTransposeCombosMatchReference) {
  for (DType dt : {DType::F32, DType::F64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 37, n = 23, k = 19;
        Tensor a = random_tensor(a_shape(m, k, ta), dt, 1);
        Tensor b = random_tensor(b_shape(k, n, tb), dt, 2);
        Tensor c = random_tensor({m, n}, dt, 3);
        const Tensor expect = reference(a, b, c, ta, tb, 1.0, 0.0);
        matmul(a, b, c, ta, tb);
        // float32: k = 19 products of |x| < 1, each rounded once; norm-wise error stays
        // within a few ulp of 2^-24. float64: BLAS and the loop differ only in rounding.
        EXPECT_LT(rel_error(c, expect), dt == DType::F32 ? 1e-6 : 1e-14)
            << dtype_name(dt) << " ta=" << ta << " tb=" << tb;
      }
}

TEST(OpMatmul, RowStridedViewsAlphaBeta) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 17, n = 30, k = 41;
      const Dims as = a_shape(m, k, ta), bs = b_shape(k, n, tb);
      Tensor a = strided_view(as[0], as[1], 5, DType::F32, 10);
      Tensor b = strided_view(bs[0], bs[1], 3, DType::F32, 11);
      Tensor c = strided_view(m, n, 7, DType::F32, 12);
      ASSERT_FALSE(a.is_contiguous());
      ASSERT_FALSE(c.is_contiguous());
      const Tensor expect = reference(a, b, c, ta, tb, -0.5, 0.75);
      // The padding columns around c (cut from the same buffer) must not be touched.
      const Tensor padding_before = Tensor::from_blob(c.storage()->data(), {m, n + 7}, DType::F32).clone();
      matmul(a, b, c, ta, tb, -0.5, 0.75);
      EXPECT_LT(rel_error(c, expect), 1e-6) << "ta=" << ta << " tb=" << tb;
      const Tensor after = Tensor::from_blob(c.storage()->data(), {m, n + 7}, DType::F32);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j : {int64_t(0), int64_t(1), int64_t(2), n + 3, n + 4, n + 5, n + 6})
          ASSERT_EQ(after.get({i, j}), padding_before.get({i, j})) << "padding column " << j << " was written";
    }
}

TEST(OpMatmul, BetaAccumulatesLinearLayerGradient) {
  // dW += dy^T x, the pattern of linear backward across micro-batches.
  const int64_t rows = 12, in = 9, out = 7;
  Tensor x = random_tensor({rows, in}, DType::F32, 20);
  Tensor dy = random_tensor({rows, out}, DType::F32, 21);
  Tensor dw = random_tensor({out, in}, DType::F32, 22);
  const Tensor expect = reference(dy, x, dw, true, false, 1.0, 1.0);
  matmul(dy, x, dw, true, false, 1.0, 1.0);
  EXPECT_LT(rel_error(dw, expect), 1e-6);
  // Twice in a row is the sum of both contributions.
  const Tensor expect2 = reference(dy, x, dw, true, false, 1.0, 1.0);
  matmul(dy, x, dw, true, false, 1.0, 1.0);
  EXPECT_LT(rel_error(dw, expect2), 1e-6);
}

TEST(OpMatmul, BetaZeroOverwritesNaN) {
  Tensor a = random_tensor({8, 5}, DType::F32, 30), b = random_tensor({5, 6}, DType::F32, 31);
  Tensor c = Tensor::empty({8, 6}, DType::F32);
  c.fill_(std::numeric_limits<double>::quiet_NaN());
  matmul(a, b, c, false, false);
  const Tensor expect = reference(a, b, Tensor::zeros({8, 6}, DType::F64), false, false, 1.0, 0.0);
  EXPECT_LT(rel_error(c, expect), 1e-6);
  // k == 0: the product is empty, c becomes beta * c, and beta == 0 still overwrites NaN.
  Tensor a0 = Tensor::empty({4, 0}, DType::F32), b0 = Tensor::empty({0, 3}, DType::F32);
  Tensor c0 = Tensor::empty({4, 3}, DType::F32);
  c0.fill_(std::numeric_limits<double>::quiet_NaN());
  matmul(a0, b0, c0, false, false);
  for (int64_t i = 0; i < c0.numel(); ++i) EXPECT_EQ(c0.get_flat(i), 0.0);
  c0.fill_(2.0);
  matmul(a0, b0, c0, false, false, 1.0, 0.5);
  for (int64_t i = 0; i < c0.numel(); ++i) EXPECT_EQ(c0.get_flat(i), 1.0);
}

TEST(OpMatmul, DegenerateSizesAreNoOps) {
  Tensor a = Tensor::empty({0, 5}, DType::F32), b = random_tensor({5, 3}, DType::F32, 40);
  Tensor c = Tensor::empty({0, 3}, DType::F32);
  EXPECT_NO_THROW(matmul(a, b, c, false, false));
  Tensor a1 = random_tensor({4, 5}, DType::F32, 41), b1 = Tensor::empty({5, 0}, DType::F32);
  Tensor c1 = Tensor::empty({4, 0}, DType::F32);
  EXPECT_NO_THROW(matmul(a1, b1, c1, false, false));
}

TEST(OpMatmul, FloatAgreesWithDouble) {
  const int64_t m = 64, n = 48, k = 200;
  Tensor a64 = random_tensor({m, k}, DType::F64, 50), b64 = random_tensor({n, k}, DType::F64, 51);
  Tensor c64 = Tensor::empty({m, n}, DType::F64), c32 = Tensor::empty({m, n}, DType::F32);
  matmul(a64, b64, c64, false, true);
  matmul(a64.to(DType::F32), b64.to(DType::F32), c32, false, true);
  // Inputs rounded to float (2^-24 each) and k = 200 float accumulations: the norm-wise
  // difference grows like sqrt(k) ulp, well below 1e-6.
  EXPECT_LT(rel_error(c32, c64), 1e-6);
}

// Gradients of L = sum(W * c), c = alpha op(a) op(b) + beta c0, in the forms the linear
// layer uses: dop(a) = alpha dc op(b)^T, dop(b) = alpha op(a)^T dc, dc0 = beta dc.
TEST(OpMatmul, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 60;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 5, n = 7, k = 3;
      const double alpha = 1.5, beta = -0.25;
      Tensor a = random_tensor(a_shape(m, k, ta), DType::F64, ++seed);
      Tensor b = random_tensor(b_shape(k, n, tb), DType::F64, ++seed);
      Tensor c0 = random_tensor({m, n}, DType::F64, ++seed);
      Tensor w = random_tensor({m, n}, DType::F64, ++seed);
      auto loss = [&] {
        Tensor c = c0.clone();
        matmul(a, b, c, ta, tb, alpha, beta);
        return weighted_sum(c, w);
      };
      // da: op(a) = a -> da = alpha w op(b)^T ; op(a) = a^T -> da = alpha op(b) w^T.
      Tensor da = Tensor::empty(a.sizes(), DType::F64), db = Tensor::empty(b.sizes(), DType::F64);
      if (!ta) matmul(w, b, da, false, !tb, alpha);
      else matmul(b, w, da, tb, true, alpha);
      if (!tb) matmul(a, w, db, !ta, false, alpha);
      else matmul(w, a, db, true, ta, alpha);
      Tensor dc0 = w.clone();
      for (int64_t i = 0; i < dc0.numel(); ++i) dc0.set_flat(i, beta * w.get_flat(i));
      // L is bilinear in (a, b), so central differences are exact up to rounding:
      // ~1e-16 / h = 1e-10 relative; 1e-7 leaves room without hiding a wrong transpose.
      EXPECT_LT(fd_rel_error(loss, a, da), 1e-7) << "da ta=" << ta << " tb=" << tb;
      EXPECT_LT(fd_rel_error(loss, b, db), 1e-7) << "db ta=" << ta << " tb=" << tb;
      EXPECT_LT(fd_rel_error(loss, c0, dc0), 1e-7) << "dc ta=" << ta << " tb=" << tb;
    }
}

// EXPECT_THROW plus: the message names the argument.
TEST(OpMatmul, BadInputIsRejectedWithClearMessage) {
  Tensor a = random_tensor({4, 5}, DType::F32, 70), b = random_tensor({5, 6}, DType::F32, 71);
  Tensor c = Tensor::empty({4, 6}, DType::F32);
  EXPECT_ERROR_MENTIONS(matmul(a, b.transpose(0, 1).clone(), c, false, false), "inner dimensions");
  EXPECT_ERROR_MENTIONS(matmul(a, b, Tensor::empty({4, 7}, DType::F32), false, false), "c must have shape [4, 6]");
  EXPECT_ERROR_MENTIONS(matmul(a, b.to(DType::F64), c, false, false), "b (float64");
  EXPECT_ERROR_MENTIONS(matmul(a, b, c.to(DType::F64), false, false), "c (float64");
  EXPECT_ERROR_MENTIONS(matmul(Tensor::empty({2, 2, 5}, DType::F32), b, c, false, false), "a must have 2 dimensions");
  EXPECT_ERROR_MENTIONS(matmul(Tensor(), b, c, false, false), "a is an undefined tensor");
  // Non-packed layout: a transposed view has stride(1) != 1.
  EXPECT_ERROR_MENTIONS(matmul(a.transpose(0, 1).transpose(0, 1), b.transpose(0, 1), c, false, true),
                        "b must have a packed last dimension");
  EXPECT_ERROR_MENTIONS(matmul(a, b, Tensor::empty({6, 4}, DType::F32).transpose(0, 1), false, false),
                        "c must have a packed last dimension");
  Tensor i32 = Tensor::empty({4, 5}, DType::I32);
  EXPECT_ERROR_MENTIONS(matmul(i32, b, c, false, false), "a must be a floating-point");
  // c overlapping an input is undefined behaviour in BLAS.
  Tensor sq = random_tensor({4, 4}, DType::F32, 72);
  EXPECT_ERROR_MENTIONS(matmul(sq, random_tensor({4, 4}, DType::F32, 73), sq, false, false), "c (float32[4, 4] on cpu) overlaps a");
  // Side-by-side column slices of one fused buffer do not overlap and are accepted.
  Tensor fused = random_tensor({4, 10}, DType::F32, 74);
  EXPECT_NO_THROW(matmul(fused.narrow(1, 0, 5), random_tensor({5, 5}, DType::F32, 75), fused.narrow(1, 5, 5),
                         false, false));
}

}  // namespace
}  // namespace fsdp::test
