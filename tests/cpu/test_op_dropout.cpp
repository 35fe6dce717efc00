// Dropout on the CPU: the mask is dropout_keeps' rule element by element, kept values are
// scaled by 1 / (1 - p), the backward applies the same mask (checked against finite
// differences of a weighted sum, which dropout makes exactly linear), a row block computed
// on its own with its global row offset equals those rows of the whole (and a column block
// with its global column offset those columns), the keep rate is
// 1 - p within four standard deviations, p = 0 copies, and the bits do not depend on the
// thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "fsdp/ops/dropout.h"
#include "test_util.h"

namespace fsdp {
namespace {

constexpr uint64_t kKey = 0x5eed1234u;

TEST(OpDropout, ForwardIsTheMaskTimesTheScale) {
  for (DType t : {DType::F32, DType::F64}) {
    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor x = test::random_tensor({37, 129}, t, 3);
      Tensor out = Tensor::empty({37, 129}, t);
      dropout_forward(x, out, p, kKey, 1000);
      const uint64_t thr = dropout_threshold(p);
      for (int64_t i = 0; i < 37; ++i)
        for (int64_t j = 0; j < 129; ++j) {
          const double want = dropout_keeps(kKey, 1000 + i, j, thr)
                                  ? (t == DType::F32 ? double(float(x.get({i, j})) * float(1.0 / (1.0 - p)))
                                                     : x.get({i, j}) * (1.0 / (1.0 - p)))
                                  : 0.0;
          ASSERT_EQ(out.get({i, j}), want) << dtype_name(t) << " p " << p << " at " << i << ", " << j;
        }
    }
  }
}

TEST(OpDropout, KeepRateIsOneMinusP) {
  const int64_t rows = 400, cols = 250;  // 100,000 draws
  for (double p : {0.05, 0.1, 0.5}) {
    const Tensor x = Tensor::empty({rows, cols}, DType::F32);
    x.fill_(1.0);
    Tensor out = Tensor::empty({rows, cols}, DType::F32);
    dropout_forward(x, out, p, kKey, 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < rows * cols; ++i) kept += out.get_flat(i) != 0;
    const double n = double(rows * cols), sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(double(kept), n * (1 - p), 4 * sd) << "p " << p;
  }
}

TEST(OpDropout, ZeroCopiesAndKeysDiffer) {
  const Tensor x = test::random_tensor({9, 33}, DType::F32, 5);
  Tensor out = Tensor::empty({9, 33}, DType::F32);
  dropout_forward(x, out, 0.0, kKey, 7);
  EXPECT_TRUE(test::same_bits(out, x));
  Tensor a = Tensor::empty({9, 33}, DType::F32), b = Tensor::empty({9, 33}, DType::F32);
  dropout_forward(x, a, 0.5, kKey, 7);
  dropout_forward(x, b, 0.5, kKey + 1, 7);
  EXPECT_FALSE(test::same_bits(a, b));
}

// The mask belongs to the global row: rows [5, 12) computed alone (row0 + 5) are those
// rows of the whole, so a micro-batch (or a rank) drops what the whole batch would.
TEST(OpDropout, RowBlocksAreRowsOfTheWhole) {
  const Tensor x = test::random_tensor({20, 17}, DType::F32, 11);
  Tensor whole = Tensor::empty({20, 17}, DType::F32), part = Tensor::empty({7, 17}, DType::F32);
  dropout_forward(x, whole, 0.3, kKey, 100);
  dropout_forward(x.narrow(0, 5, 7), part, 0.3, kKey, 105);
  EXPECT_TRUE(test::same_bits(part, whole.narrow(0, 5, 7)));
}

// And to the global column: a tensor-parallel rank's columns [6, 13) of the features,
// computed alone with col0 6, are those columns of the whole (LoRA on a row-parallel
// weight drops what one process drops), forward and accumulating backward.
TEST(OpDropout, ColumnSlicesAreColumnsOfTheWhole) {
  const Tensor x = test::random_tensor({9, 20}, DType::F32, 12);
  Tensor whole = Tensor::empty({9, 20}, DType::F32), part = Tensor::empty({9, 7}, DType::F32);
  dropout_forward(x, whole, 0.3, kKey, 100);
  dropout_forward(x.narrow(1, 6, 7).clone(), part, 0.3, kKey, 100, /*col0=*/6);
  EXPECT_TRUE(test::same_bits(part, whole.narrow(1, 6, 7).clone()));
  Tensor dwhole = Tensor::empty({9, 20}, DType::F32), dpart = Tensor::empty({9, 7}, DType::F32);
  dwhole.fill_(1.0);
  dpart.fill_(1.0);
  dropout_backward(x, dwhole, 0.3, kKey, 100, /*accumulate=*/true);
  dropout_backward(x.narrow(1, 6, 7).clone(), dpart, 0.3, kKey, 100, /*accumulate=*/true, /*col0=*/6);
  EXPECT_TRUE(test::same_bits(dpart, dwhole.narrow(1, 6, 7).clone()));
  // Not the mask of columns [0, 7): the offset is what places them.
  dropout_forward(x.narrow(1, 6, 7).clone(), part, 0.3, kKey, 100);
  EXPECT_FALSE(test::same_bits(part, whole.narrow(1, 6, 7).clone()));
}

// L = sum(w * dropout(x)) is linear in x: its gradient is dropout_backward(w), and central
// differences recover it exactly up to rounding.
TEST(OpDropout, BackwardMatchesFiniteDifferences) {
  const Tensor x = test::random_tensor({6, 11}, DType::F64, 21);
  const Tensor w = test::random_tensor({6, 11}, DType::F64, 22);
  const double p = 0.4;
  Tensor out = Tensor::empty({6, 11}, DType::F64);
  auto loss = [&] {
    dropout_forward(x, out, p, kKey, 3);
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += w.get_flat(i) * out.get_flat(i);
    return s;
  };
  Tensor dx = Tensor::empty({6, 11}, DType::F64);
  dropout_backward(w, dx, p, kKey, 3, /*accumulate=*/false);
  EXPECT_LT(test::fd_rel_error(loss, x, dx), 1e-8);
  // accumulate adds onto what is there.
  Tensor acc = Tensor::empty({6, 11}, DType::F64);
  acc.fill_(1.0);
  dropout_backward(w, acc, p, kKey, 3, /*accumulate=*/true);
  for (int64_t i = 0; i < acc.numel(); ++i) ASSERT_EQ(acc.get_flat(i), 1.0 + dx.get_flat(i)) << i;
}

TEST(OpDropout, RowStridedViewsAndThreadCountsGiveTheSameBits) {
  const Tensor big = test::random_tensor({64, 300}, DType::F32, 31);
  const Tensor x = big.narrow(1, 10, 257);  // rows 300 apart
  const auto outs = test::under_thread_counts([&] {
    Tensor out = Tensor::empty({64, 257}, DType::F32);
    dropout_forward(x, out, 0.25, kKey, 9);
    return out;
  });
  EXPECT_TRUE(test::same_bits(outs[0], outs[1]));
  EXPECT_TRUE(test::same_bits(outs[0], outs[2]));
  Tensor packed = Tensor::empty({64, 257}, DType::F32);
  dropout_forward(x.clone(), packed, 0.25, kKey, 9);
  EXPECT_TRUE(test::same_bits(outs[0], packed));
}

TEST(OpDropout, BadArgumentsNameTheProblem) {
  const Tensor x = Tensor::zeros({3, 4}, DType::F32);
  Tensor out = Tensor::empty({3, 4}, DType::F32);
  test::expect_error([&] { dropout_forward(x, out, 1.0, kKey, 0); }, {"dropout: p must be in [0, 1), got 1"});
  test::expect_error([&] { dropout_forward(x, out, -0.1, kKey, 0); }, {"p must be in [0, 1)"});
  test::expect_error([&] { dropout_forward(x, Tensor::empty({3, 5}, DType::F32), 0.1, kKey, 0); }, {"out"});
  test::expect_error([&] { dropout_forward(x, out, 0.1, kKey, -1); }, {"row0 must be >= 0"});
  test::expect_error([&] { dropout_forward(x, out, 0.1, kKey, 0, -1); }, {"col0 must be >= 0"});
}

}  // namespace
}  // namespace fsdp
