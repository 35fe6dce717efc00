// Fused softmax cross-entropy on the CPU backend: a naive float64 reference (including
// logits far too large for a naive exp), central finite differences with ignored rows,
// in-place gradients, and errors that name the row and the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

// -log softmax(x)[t] from the definition in long double (no max trick needed there for
// moderate logits; the large-logit case below shifts by a known constant).
double reference_loss(const Tensor& logits, int64_t row, int64_t target, double shift = 0.0) {
  long double s = 0;
  for (int64_t v = 0; v < logits.size(1); ++v) s += std::exp((long double)(logits.get({row, v}) - shift));
  return double(std::log(s) - (long double)(logits.get({row, target}) - shift));
}

TEST(OpCrossEntropy, ForwardMatchesReference) {
  for (DType dt : {DType::F64, DType::F32}) {
    for (DType tt : {DType::I32, DType::I64}) {
      const int64_t n = 6, v = 13;
      const Tensor logits = random_tensor({n, v}, dt, 1, -4.0, 4.0);
      const Tensor targets = index_tensor({0, 12, kIgnoreIndex, 5, 5, kIgnoreIndex}, tt);
      const Tensor losses = Tensor::empty({n}, stat_dtype(dt));
      const Tensor before = logits.clone();
      cross_entropy_forward(logits, targets, losses);
      // float64: log/exp rounding only, ~1e-15. float32: expf within an ulp per term, sums
      // in double, so the loss carries ~1e-7 relative.
      const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = int64_t(targets.get_flat(i));
        if (t == kIgnoreIndex) {
          EXPECT_EQ(losses.get({i}), 0.0);
        } else {
          const double ref = reference_loss(logits, i, t);
          EXPECT_NEAR(losses.get({i}), ref, tol * std::max(1.0, std::fabs(ref))) << i;
        }
      }
      EXPECT_EQ(std::memcmp(before.data_ptr(), logits.data_ptr(), logits.nbytes()), 0) << "forward wrote logits";
    }
  }
}

TEST(OpCrossEntropy, LargeLogitsAreStable) {
  // Logits around 1e4: exp overflows in float and double without the max subtraction.
  const int64_t n = 3, v = 7;
  const double shift = 1e4;
  const Tensor base = random_tensor({n, v}, DType::F64, 2, -3.0, 3.0);
  const Tensor logits = Tensor::empty({n, v}, DType::F32);
  for (int64_t i = 0; i < n * v; ++i) logits.set_flat(i, base.get_flat(i) + shift);
  const Tensor targets = index_tensor({1, 6, 0}, DType::I64);
  const Tensor losses = Tensor::empty({n}, DType::F32), dlogits = Tensor::empty({n, v}, DType::F32);
  cross_entropy_forward_backward(logits, targets, losses, dlogits, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    // float32 logits near 1e4 are quantised to 2^-10 ~ 1e-3, so compare with the stored
    // (rounded) logits; the loss itself is O(1) and accurate to ~1e-6.
    EXPECT_NEAR(losses.get({i}), reference_loss(logits, i, int64_t(targets.get_flat(i)), shift), 1e-5) << i;
    double row = 0;
    for (int64_t j = 0; j < v; ++j) {
      ASSERT_TRUE(std::isfinite(dlogits.get({i, j})));
      row += dlogits.get({i, j});
    }
    EXPECT_NEAR(row, 0.0, 1e-6);  // softmax sums to one, minus the one-hot
  }
}

TEST(OpCrossEntropy, GradientMatchesFiniteDifferencesWithIgnoredRows) {
  // f = grad_scale * sum of losses; dlogits must be its gradient. Central differences in
  // float64 with h = 1e-6: truncation ~1e-12, rounding ~1e-10, so a correct gradient lands
  // near 1e-9; 1e-6 separates that from any wrong term. Ignored rows must get exact zeros.
  const double scale = 0.37;
  for (auto [n, v] : {std::pair<int64_t, int64_t>{1, 13}, {6, 13}, {5, 40}}) {
    const Tensor logits = random_tensor({n, v}, DType::F64, 3 + n, -3.0, 3.0);
    std::vector<int64_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = (i % 3 == 1) ? kIgnoreIndex : (i * 7 + 3) % v;
    const Tensor targets = index_tensor(t, DType::I32);
    const Tensor losses = Tensor::empty({n}, DType::F64), dlogits = Tensor::empty({n, v}, DType::F64);
    cross_entropy_forward_backward(logits, targets, losses, dlogits, scale);
    auto f = [&] {
      cross_entropy_forward(logits, targets, losses);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += losses.get({i});
      return scale * s;
    };
    EXPECT_LT(fd_rel_error(f, logits, dlogits), 1e-6) << n << "x" << v;
    for (int64_t i = 0; i < n; ++i) {
      if (t[size_t(i)] != kIgnoreIndex) continue;
      EXPECT_EQ(losses.get({i}), 0.0);
      for (int64_t j = 0; j < v; ++j) EXPECT_EQ(dlogits.get({i, j}), 0.0);
    }
  }
}

TEST(OpCrossEntropy, InPlaceGradientEqualsSeparateBuffer) {
  const int64_t n = 37, v = 1000;  // large enough for the parallel path
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor logits = random_tensor({n, v}, dt, 4, -5.0, 5.0);
    std::vector<int64_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i == 3 ? kIgnoreIndex : (i * 31) % v;
    const Tensor targets = index_tensor(t, DType::I64);
    const Tensor losses = Tensor::empty({n}, stat_dtype(dt)), losses2 = Tensor::empty({n}, stat_dtype(dt));
    const Tensor dlogits = Tensor::empty({n, v}, dt);
    cross_entropy_forward_backward(logits, targets, losses, dlogits, 0.5);
    cross_entropy_forward_backward(logits, targets, losses2, logits, 0.5);  // in place
    EXPECT_EQ(std::memcmp(dlogits.data_ptr(), logits.data_ptr(), logits.nbytes()), 0);
    EXPECT_EQ(std::memcmp(losses.data_ptr(), losses2.data_ptr(), losses.nbytes()), 0);
  }
}

TEST(OpCrossEntropy, CustomIgnoreIndexAndRowStridedLogits) {
  // Logits as a column slice of a wider buffer; ignore_index -1 instead of -100.
  const int64_t n = 4, v = 13;
  const Tensor wide = random_tensor({n, v + 3}, DType::F64, 5);
  const Tensor logits = wide.narrow(1, 1, v), packed = logits.clone();
  const Tensor targets = index_tensor({2, -1, 12, 0}, DType::I64);
  const Tensor l1 = Tensor::empty({n}, DType::F64), l2 = Tensor::empty({n}, DType::F64);
  const Tensor d1 = Tensor::empty({n, v}, DType::F64), d2 = Tensor::empty({n, v}, DType::F64);
  cross_entropy_forward_backward(logits, targets, l1, d1, 1.0, -1);
  cross_entropy_forward_backward(packed, targets, l2, d2, 1.0, -1);
  EXPECT_EQ(l1.get({1}), 0.0);
  EXPECT_LT(rel_error(l1, l2), 1e-15);
  EXPECT_LT(rel_error(d1, d2), 1e-15);
  // -100 is now an ordinary (out-of-range) target.
  expect_error([&] { cross_entropy_forward(logits, index_tensor({2, -100, 1, 0}, DType::I64), l1, -1); },
               {"target -100 at row 1"});
}

TEST(OpCrossEntropy, TargetOutOfRangeNamesRowAndValue) {
  const int64_t n = 3, v = 13;
  const Tensor logits = random_tensor({n, v}, DType::F32, 6);
  const Tensor before = logits.clone();
  const Tensor losses = Tensor::empty({n}, DType::F32);
  expect_error([&] { cross_entropy_forward(logits, index_tensor({0, 1, 13}, DType::I32), losses); },
               {"target 13 at row 2", "[0, 13)"});
  expect_error([&] { cross_entropy_forward(logits, index_tensor({-5, 1, 2}, DType::I64), losses); },
               {"target -5 at row 0"});
  // In place with a bad target in the last row: nothing may have been overwritten yet.
  expect_error([&] { cross_entropy_forward_backward(logits, index_tensor({0, 1, 99}, DType::I64), losses, logits, 1.0); },
               {"target 99 at row 2"});
  EXPECT_EQ(std::memcmp(before.data_ptr(), logits.data_ptr(), logits.nbytes()), 0);
}

TEST(OpCrossEntropy, BadArgumentsNameTheArgument) {
  const int64_t n = 3, v = 7;
  const Tensor logits = random_tensor({n, v}, DType::F32, 7);
  const Tensor targets = index_tensor({0, 1, 2}, DType::I64);
  const Tensor losses = Tensor::empty({n}, DType::F32), d = Tensor::empty({n, v}, DType::F32);
  expect_error([&] { cross_entropy_forward(logits, targets, Tensor::empty({n}, DType::F64)); }, {"losses", "float32"});
  expect_error([&] { cross_entropy_forward(logits, targets, Tensor::empty({n + 1}, DType::F32)); }, {"losses", "[3]"});
  expect_error([&] { cross_entropy_forward(logits, index_tensor({0, 1}, DType::I64), losses); }, {"targets", "[3]"});
  expect_error([&] { cross_entropy_forward(logits, targets.to(DType::F32), losses); }, {"targets", "int32 or int64"});
  expect_error([&] { cross_entropy_forward(logits, index_tensor({0, 9, 1, 9, 2, 9}, DType::I64).slice(0, 0, 6, 2), losses); },
               {"targets must be contiguous"});
  expect_error([&] { cross_entropy_forward(logits.reshape({-1}), targets, losses); }, {"logits", "2 dimensions"});
  expect_error([&] { cross_entropy_forward(random_tensor({v, n}, DType::F32, 8).transpose(0, 1), targets, losses); },
               {"logits", "packed"});
  expect_error([&] { cross_entropy_forward_backward(logits, targets, losses, Tensor::empty({n, v}, DType::F64), 1.0); },
               {"dlogits", "same dtype"});
  expect_error([&] { cross_entropy_forward_backward(logits, targets, losses, Tensor::empty({n, v + 1}, DType::F32), 1.0); },
               {"dlogits", "[3, 7]"});
  expect_error([&] { cross_entropy_forward_backward(logits, targets, losses, d, std::nan("")); }, {"grad_scale"});
  // A shifted view of the same buffer overlaps without being the same tensor.
  const Tensor buf = random_tensor({n + 1, v}, DType::F32, 9);
  expect_error([&] { cross_entropy_forward_backward(buf.narrow(0, 0, n), targets, losses, buf.narrow(0, 1, n), 1.0); },
               {"dlogits must either be logits itself or not overlap it"});
  expect_error([&] { cross_entropy_forward(logits.to(DType::BF16), targets, losses); },
               {"bfloat16", "not implemented on the CPU"});
}

}  // namespace
}  // namespace fsdp::test
