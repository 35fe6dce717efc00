// RMSNorm forward/backward on the CPU backend: a naive float64 reference, central finite
// differences for x and w (accumulating dx and not), row-strided views, thread-count-
// independent dw bits, and errors that name the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fsdp/ops/rmsnorm.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

constexpr double kEps = 1e-5;

// y = x / sqrt(mean(x^2) + eps) * w, straight from the definition, in double.
Tensor reference_forward(const Tensor& x, const Tensor& w, double eps) {
  const int64_t n = x.size(0), c = x.size(1);
  Tensor y = Tensor::empty({n, c}, DType::F64);
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += x.get({i, j}) * x.get({i, j});
    const double r = 1.0 / std::sqrt(ss / double(c) + eps);
    for (int64_t j = 0; j < c; ++j) y.set({i, j}, x.get({i, j}) * r * w.get({j}));
  }
  return y;
}

TEST(OpRmsnorm, ForwardMatchesReference) {
  for (auto [n, c] : {std::pair<int64_t, int64_t>{1, 7}, {5, 13}, {64, 300}}) {
    for (DType dt : {DType::F64, DType::F32}) {
      const Tensor x = random_tensor({n, c}, dt, 1, -2.0, 2.0);
      const Tensor w = random_tensor({c}, dt, 2, 0.5, 1.5);
      const Tensor y = Tensor::empty({n, c}, dt);
      const Tensor rstd = Tensor::empty({n}, stat_dtype(dt));
      rmsnorm_forward(x, w, y, rstd, kEps);
      // float64: only rounding in a different summation order (~1e-16 per element).
      // float32: inputs are exact in both, so the error is a few float roundings of y,
      // rstd and the products: a few units of 2^-24 ~ 6e-8.
      const double tol = dt == DType::F64 ? 1e-14 : 5e-7;
      EXPECT_LT(rel_error(y, reference_forward(x, w, kEps)), tol) << n << "x" << c << " " << dtype_name(dt);
      double ss = 0;
      for (int64_t j = 0; j < c; ++j) ss += x.get({0, j}) * x.get({0, j});
      EXPECT_NEAR(rstd.get({0}), 1.0 / std::sqrt(ss / double(c) + kEps), tol * 10);
    }
  }
}

TEST(OpRmsnorm, BackwardMatchesFiniteDifferences) {
  // Central differences with h = 1e-6 in float64: truncation O(h^2) ~ 1e-12 and rounding
  // ~ 1e-16 / 1e-6 = 1e-10 relative, so a correct gradient lands near 1e-9; 1e-6 keeps a
  // wide margin while any wrong term in dx or dw (an O(1) relative error) fails loudly.
  for (auto [n, c] : {std::pair<int64_t, int64_t>{1, 7}, {5, 13}, {3, 33}}) {
    for (bool accumulate : {false, true}) {
      const Tensor x = random_tensor({n, c}, DType::F64, 3 + n, -2.0, 2.0);
      const Tensor w = random_tensor({c}, DType::F64, 4, 0.5, 1.5);
      const Tensor wts = random_tensor({n, c}, DType::F64, 5);  // dL/dy
      const Tensor y = Tensor::empty({n, c}, DType::F64);
      const Tensor rstd = Tensor::empty({n}, DType::F64);
      auto loss = [&] {
        rmsnorm_forward(x, w, y, rstd, kEps);
        return weighted_sum(y, wts);
      };
      loss();
      // Pre-filled dx / dw: accumulate_dx adds to dx, dw is always added to.
      const Tensor dx0 = random_tensor({n, c}, DType::F64, 6);
      const Tensor dw0 = random_tensor({c}, DType::F64, 7);
      const Tensor dx = dx0.clone(), dw = dw0.clone();
      rmsnorm_backward(wts, x, w, rstd, dx, dw, accumulate);
      const Tensor gx = Tensor::empty({n, c}, DType::F64), gw = Tensor::empty({c}, DType::F64);
      for (int64_t i = 0; i < n * c; ++i) gx.set_flat(i, dx.get_flat(i) - (accumulate ? dx0.get_flat(i) : 0.0));
      for (int64_t j = 0; j < c; ++j) gw.set_flat(j, dw.get_flat(j) - dw0.get_flat(j));
      EXPECT_LT(fd_rel_error(loss, x, gx), 1e-6) << "dx " << n << "x" << c << " acc=" << accumulate;
      EXPECT_LT(fd_rel_error(loss, w, gw), 1e-6) << "dw " << n << "x" << c << " acc=" << accumulate;
    }
  }
}

TEST(OpRmsnorm, Float32BackwardMatchesFloat64) {
  // The same inputs in float32 and float64: float32 rounding of O(1) values over a
  // 300-wide row (row sums in double) stays within ~1e-6 relative.
  const int64_t n = 37, c = 300;
  const Tensor x64 = random_tensor({n, c}, DType::F64, 8), w64 = random_tensor({c}, DType::F64, 9);
  const Tensor dy64 = random_tensor({n, c}, DType::F64, 10);
  Tensor dx[2], dw[2];
  int k = 0;
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor x = x64.to(dt), w = w64.to(dt), dy = dy64.to(dt);
    const Tensor y = Tensor::empty({n, c}, dt), rstd = Tensor::empty({n}, stat_dtype(dt));
    rmsnorm_forward(x, w, y, rstd, kEps);
    dx[k] = Tensor::empty({n, c}, dt);
    dw[k] = Tensor::zeros({c}, dt);
    rmsnorm_backward(dy, x, w, rstd, dx[k], dw[k], false);
    ++k;
  }
  EXPECT_LT(rel_error(dx[1], dx[0]), 2e-6);
  EXPECT_LT(rel_error(dw[1], dw[0]), 2e-6);
}

TEST(OpRmsnorm, RowStridedViewsGiveTheSameBits) {
  // x, y, dy and dx as column slices of wider buffers (row stride != C), as when a fused
  // projection is split by views; the kernel must read each row at its stride.
  const int64_t n = 9, c = 13, pad = 9;
  const Tensor x = random_tensor({n, c}, DType::F32, 11), w = random_tensor({c}, DType::F32, 12);
  const Tensor dy = random_tensor({n, c}, DType::F32, 13);
  const Tensor xw = random_tensor({n, c + pad}, DType::F32, 14), dyw = random_tensor({n, c + pad}, DType::F32, 15);
  const Tensor xv = xw.narrow(1, 4, c), dyv = dyw.narrow(1, 2, c);
  xv.copy_(x);
  dyv.copy_(dy);
  const Tensor yw = Tensor::zeros({n, c + pad}, DType::F32), dxw = Tensor::zeros({n, c + pad}, DType::F32);
  const Tensor yv = yw.narrow(1, pad, c), dxv = dxw.narrow(1, 1, c);
  ASSERT_FALSE(xv.is_contiguous());
  ASSERT_TRUE(xv.rows_packed());

  const Tensor y = Tensor::empty({n, c}, DType::F32), rstd = Tensor::empty({n}, DType::F32);
  const Tensor dx = Tensor::empty({n, c}, DType::F32), dw = Tensor::zeros({c}, DType::F32);
  rmsnorm_forward(x, w, y, rstd, kEps);
  rmsnorm_backward(dy, x, w, rstd, dx, dw, false);
  const Tensor rstd_v = Tensor::empty({n}, DType::F32), dw_v = Tensor::zeros({c}, DType::F32);
  rmsnorm_forward(xv, w, yv, rstd_v, kEps);
  rmsnorm_backward(dyv, xv, w, rstd_v, dxv, dw_v, false);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(rstd.get({i}), rstd_v.get({i}));
    for (int64_t j = 0; j < c; ++j) {
      ASSERT_EQ(y.get({i, j}), yv.get({i, j}));
      ASSERT_EQ(dx.get({i, j}), dxv.get({i, j}));
    }
    EXPECT_EQ(yw.get({i, 0}), 0.0);  // outside the view: untouched
    EXPECT_EQ(dxw.get({i, 0}), 0.0);
  }
  for (int64_t j = 0; j < c; ++j) EXPECT_EQ(dw.get({j}), dw_v.get({j}));
}

// A frozen weight (LoRA's base): no dw given, the same dx bits, accumulated or not.
TEST(OpRmsnorm, UndefinedDwGivesTheSameDx) {
  const int64_t n = 70, c = 33;
  const Tensor x = random_tensor({n, c}, DType::F32, 41), w = random_tensor({c}, DType::F32, 42);
  const Tensor dy = random_tensor({n, c}, DType::F32, 43);
  const Tensor y = Tensor::empty({n, c}, DType::F32), rstd = Tensor::empty({n}, DType::F32);
  rmsnorm_forward(x, w, y, rstd, kEps);
  for (bool accumulate : {false, true}) {
    const Tensor dx = random_tensor({n, c}, DType::F32, 44), dx_frozen = dx.clone();
    rmsnorm_backward(dy, x, w, rstd, dx, Tensor::zeros({c}, DType::F32), accumulate);
    rmsnorm_backward(dy, x, w, rstd, dx_frozen, Tensor(), accumulate);
    EXPECT_TRUE(same_bits(dx_frozen, dx)) << "accumulate " << accumulate;
  }
}

TEST(OpRmsnorm, DwSameBitsForAnyThreadCount) {
  // float64 matters most here: float32 dw is summed in double and rounded to float, which
  // would hide a thread-dependent association most of the time.
  const int64_t n = 1000, c = 300;  // many row blocks, above the parallel threshold
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor x = random_tensor({n, c}, dt, 16), w = random_tensor({c}, dt, 17);
    const Tensor dy = random_tensor({n, c}, dt, 18);
    const Tensor y = Tensor::empty({n, c}, dt), rstd = Tensor::empty({n}, stat_dtype(dt));
    rmsnorm_forward(x, w, y, rstd, kEps);
    const std::vector<std::pair<Tensor, Tensor>> runs = under_thread_counts([&] {
      Tensor dx = Tensor::empty({n, c}, dt), dw = random_tensor({c}, dt, 19);
      rmsnorm_backward(dy, x, w, rstd, dx, dw, false);
      return std::pair{dx, dw};
    });
    for (size_t r = 1; r < runs.size(); ++r) {
      EXPECT_TRUE(same_bits(runs[0].second, runs[r].second)) << "dw " << dtype_name(dt) << " " << r;
      EXPECT_TRUE(same_bits(runs[0].first, runs[r].first)) << "dx " << dtype_name(dt) << " " << r;
    }
  }
}

TEST(OpRmsnorm, BadArgumentsNameTheArgument) {
  const int64_t n = 4, c = 7;
  const Tensor x = random_tensor({n, c}, DType::F32, 1), w = random_tensor({c}, DType::F32, 2);
  const Tensor y = Tensor::empty({n, c}, DType::F32), rstd = Tensor::empty({n}, DType::F32);
  const Tensor dx = Tensor::empty({n, c}, DType::F32), dw = Tensor::zeros({c}, DType::F32);
  expect_error([&] { rmsnorm_forward(x, Tensor::empty({c + 1}, DType::F32), y, rstd, kEps); }, {"w", "[7]"});
  expect_error([&] { rmsnorm_forward(x, w.to(DType::F64), y, rstd, kEps); }, {"w", "same dtype"});
  expect_error([&] { rmsnorm_forward(x, w, Tensor::empty({n, c}, DType::F64), rstd, kEps); }, {"y", "same dtype"});
  expect_error([&] { rmsnorm_forward(x, w, y, Tensor::empty({n}, DType::F64), kEps); }, {"rstd", "float32"});
  expect_error([&] { rmsnorm_forward(x, w, y, Tensor::empty({n + 1}, DType::F32), kEps); }, {"rstd", "[4]"});
  expect_error([&] { rmsnorm_forward(x.reshape({-1}), w, y, rstd, kEps); }, {"x", "2 dimensions"});
  expect_error([&] { rmsnorm_forward(random_tensor({c, n}, DType::F32, 3).transpose(0, 1), w, y, rstd, kEps); },
               {"x", "packed"});
  expect_error([&] { rmsnorm_forward(x, w, y, rstd, -1.0); }, {"eps"});
  expect_error([&] { rmsnorm_backward(Tensor::empty({n, c + 1}, DType::F32), x, w, rstd, dx, dw, false); },
               {"dy", "[4, 7]"});
  expect_error([&] { rmsnorm_backward(y, x, w, rstd, dx, Tensor::zeros({c}, DType::F64), false); },
               {"dw", "same dtype"});
  expect_error([&] { rmsnorm_backward(y, x, w, rstd, dx, Tensor::zeros({2 * c}, DType::F32).slice(0, 0, 2 * c, 2), false); },
               {"dw must be contiguous"});
  expect_error([&] { rmsnorm_backward(y, x, w, rstd, Tensor(), dw, false); }, {"dx", "undefined"});
}

}  // namespace
}  // namespace fsdp::test
