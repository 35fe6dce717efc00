// Embedding forward/backward on the CPU backend: exact copies forward, a finite-difference
// gradient with repeated ids, thread-count-independent bits backward, and errors that name
// the argument.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "fsdp/ops/embedding.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

Tensor random_ids(int64_t n, int64_t vocab, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int64_t(rng() % uint64_t(vocab));
  return index_tensor(v, dtype);
}

TEST(OpEmbedding, ForwardCopiesRowsExactly) {
  for (DType dt : {DType::F32, DType::F64}) {
    for (DType it : {DType::I32, DType::I64}) {
      const Tensor table = random_tensor({13, 7}, dt, 1);
      const Tensor ids = index_tensor({3, 0, 12, 3, 3, 7}, it);
      const Tensor out = Tensor::empty({6, 7}, dt);
      embedding_forward(ids, table, out);
      for (int64_t n = 0; n < 6; ++n)
        for (int64_t c = 0; c < 7; ++c)
          ASSERT_EQ(out.get({n, c}), table.get({int64_t(ids.get_flat(n)), c})) << n << "," << c;
    }
  }
}

TEST(OpEmbedding, ForwardWithRowStridedViews) {
  // The table and the output are column slices of wider buffers: only packed rows needed.
  const Tensor wide_table = random_tensor({13, 12}, DType::F32, 2);
  const Tensor table = wide_table.narrow(1, 3, 7);
  const Tensor wide_out = Tensor::zeros({5, 10}, DType::F32);
  const Tensor out = wide_out.narrow(1, 2, 7);
  const Tensor ids = index_tensor({12, 1, 1, 0, 5}, DType::I64);
  embedding_forward(ids, table, out);
  for (int64_t n = 0; n < 5; ++n) {
    for (int64_t c = 0; c < 7; ++c) EXPECT_EQ(out.get({n, c}), table.get({int64_t(ids.get_flat(n)), c}));
    EXPECT_EQ(wide_out.get({n, 0}), 0.0);  // columns outside the view untouched
    EXPECT_EQ(wide_out.get({n, 9}), 0.0);
  }
}

TEST(OpEmbedding, BackwardMatchesFiniteDifferencesWithRepeatedIds) {
  // out is linear in the table, so central differences are exact up to rounding: with
  // h = 1e-6 and O(1) sums, the float64 error is ~1e-10; 1e-7 leaves a wide margin while a
  // missed or doubled update (an O(1) error) fails by orders of magnitude.
  for (auto [n, v, c] : {std::tuple<int64_t, int64_t, int64_t>{1, 13, 7}, {9, 13, 7}, {20, 5, 3}}) {
    const Tensor table = random_tensor({v, c}, DType::F64, 10 + n);
    const Tensor ids = random_ids(n, v, DType::I32, 20 + n);
    if (n >= 9) ids.set_flat(1, ids.get_flat(0));  // make sure at least one id repeats
    const Tensor wts = random_tensor({n, c}, DType::F64, 30 + n);
    const Tensor out = Tensor::empty({n, c}, DType::F64);
    const Tensor dtable = Tensor::zeros({v, c}, DType::F64);
    embedding_backward(ids, wts, dtable);
    auto f = [&] {
      embedding_forward(ids, table, out);
      return weighted_sum(out, wts);
    };
    EXPECT_LT(fd_rel_error(f, table, dtable), 1e-7) << n << "x" << v << "x" << c;
  }
}

TEST(OpEmbedding, BackwardAccumulatesInRowOrder) {
  // The documented order is row order per element, so even float32 must match a naive
  // sequential accumulation bit for bit (and the existing dtable contents are kept).
  const int64_t n = 300, v = 11, c = 70;
  const Tensor ids = random_ids(n, v, DType::I64, 3);
  const Tensor dout = random_tensor({n, c}, DType::F32, 4);
  const Tensor dtable = random_tensor({v, c}, DType::F32, 5);
  std::vector<float> expect(size_t(v * c));
  for (int64_t i = 0; i < v * c; ++i) expect[size_t(i)] = float(dtable.get_flat(i));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = int64_t(ids.get_flat(i));
    for (int64_t j = 0; j < c; ++j) expect[size_t(id * c + j)] += float(dout.get({i, j}));
  }
  embedding_backward(ids, dout, dtable);
  for (int64_t i = 0; i < v * c; ++i) ASSERT_EQ(float(dtable.get_flat(i)), expect[size_t(i)]) << i;
}

TEST(OpEmbedding, BackwardSameBitsForAnyThreadCount) {
  const int64_t n = 4000, v = 50, c = 300;  // large enough for the parallel path
  const Tensor ids = random_ids(n, v, DType::I32, 6);
  const Tensor dout = random_tensor({n, c}, DType::F32, 7);
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor d = dout.to(dt);
    const std::vector<Tensor> results = under_thread_counts([&] {
      Tensor dtable = Tensor::zeros({v, c}, dt);
      embedding_backward(ids, d, dtable);
      return dtable;
    });
    for (size_t r = 1; r < results.size(); ++r) EXPECT_TRUE(same_bits(results[0], results[r])) << dtype_name(dt) << " " << r;
  }
}

TEST(OpEmbedding, IdOutOfRangeNamesIdPositionAndVocab) {
  const Tensor table = random_tensor({13, 7}, DType::F32, 1);
  const Tensor out = Tensor::zeros({3, 7}, DType::F32);
  expect_error([&] { embedding_forward(index_tensor({1, 13, 2}, DType::I64), table, out); },
               {"token id 13", "position 1", "[0, 13)"});
  expect_error([&] { embedding_forward(index_tensor({1, 2, -1}, DType::I32), table, out); },
               {"token id -1", "position 2", "[0, 13)"});
  expect_error([&] { embedding_backward(index_tensor({99, 0, 0}, DType::I32), out, table); },
               {"token id 99", "[0, 13)"});
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get_flat(i), 0.0);  // untouched
}

TEST(OpEmbedding, BadArgumentsNameTheArgument) {
  const Tensor table = random_tensor({13, 7}, DType::F32, 1);
  const Tensor ids = index_tensor({1, 2, 3}, DType::I64);
  const Tensor out = Tensor::zeros({3, 7}, DType::F32);
  expect_error([&] { embedding_forward(ids, table, Tensor::zeros({3, 6}, DType::F32)); }, {"out", "[3, 7]"});
  expect_error([&] { embedding_forward(ids, table, Tensor::zeros({3, 7}, DType::F64)); }, {"out", "table"});
  expect_error([&] { embedding_forward(ids.to(DType::F32), table, out); }, {"ids", "int32 or int64"});
  expect_error([&] { embedding_forward(Tensor::zeros({3, 1}, DType::I64), table, out); }, {"ids", "1 dimensions"});
  expect_error([&] { embedding_forward(index_tensor({1, 0, 2, 0, 3, 0}, DType::I64).slice(0, 0, 6, 2), table, out); },
               {"ids must be contiguous"});
  expect_error([&] { embedding_forward(ids, random_tensor({7, 13}, DType::F32, 1).transpose(0, 1), out); },
               {"table", "packed"});
  expect_error([&] { embedding_forward(ids, Tensor(), out); }, {"table", "undefined"});
  expect_error([&] { embedding_backward(ids, Tensor::zeros({4, 7}, DType::F32), Tensor::zeros({13, 7}, DType::F32)); },
               {"dout", "[3, 7]"});
  expect_error([&] { embedding_forward(ids, table.to(DType::BF16), out.to(DType::BF16)); },
               {"bfloat16", "not implemented on the CPU"});
}

}  // namespace
}  // namespace fsdp::test
