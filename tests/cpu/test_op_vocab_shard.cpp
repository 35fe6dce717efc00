// The vocabulary-parallel ops (embedding_shard_*, cross_entropy_shard_*) against the
// whole-vocabulary ops, with T shards simulated in one process: what each shard computes,
// combined as the tensor group combines it (the sum of the embedding shards' rows, the
// stacked cross-entropy statistics), equals the unsplit op on random inputs, with ids and
// targets at every shard boundary and ignored targets. One shard (T = 1) is the unsplit op
// to the bit. The same through real collectives: tests/mpi/test_vocab_parallel.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/embedding.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

// Every shard's first and last row, the rows just outside, and ignore_index twice.
std::vector<int64_t> boundary_ids(int64_t vocab, int shards, bool with_ignored) {
  std::vector<int64_t> ids;
  const int64_t per = vocab / shards;
  for (int s = 0; s < shards; ++s) {
    ids.push_back(s * per);
    ids.push_back(s * per + per - 1);
  }
  ids.push_back(vocab - 1);
  ids.push_back(0);
  ids.push_back(per / 2);
  if (with_ignored) {
    ids.insert(ids.begin() + 3, kIgnoreIndex);
    ids.push_back(kIgnoreIndex);
  }
  return ids;
}

TEST(OpVocabShard, CrossEntropyShardsMergeIntoTheWholeOp) {
  for (DType dt : {DType::F32, DType::F64}) {
    for (int shards : {1, 2, 3, 4}) {
      const int64_t v = 12 * 7;  // divisible by 1..4
      const std::vector<int64_t> t = boundary_ids(v, shards, true);
      const int64_t n = int64_t(t.size()), per = v / shards;
      const Tensor targets = index_tensor(t, DType::I32);
      const Tensor logits = random_tensor({n, v}, dt, 7 + shards, -6.0, 6.0);
      const Tensor want_loss = Tensor::empty({n}, stat_dtype(dt)), want_grad = Tensor::empty({n, v}, dt);
      const double scale = 0.37;
      cross_entropy_forward_backward(logits, targets, want_loss, want_grad, scale);

      const Tensor all = Tensor::zeros({shards, n, 3}, DType::F64);
      for (int s = 0; s < shards; ++s)
        cross_entropy_shard_stats(logits.narrow(1, s * per, per), targets, all.select(0, s), s * per, v);
      for (int s = 0; s < shards; ++s) {
        const Tensor mine = logits.narrow(1, s * per, per).clone();
        const Tensor loss = Tensor::empty({n}, stat_dtype(dt)), grad = Tensor::empty({n, per}, dt);
        const Tensor fwd_loss = Tensor::empty({n}, stat_dtype(dt));
        cross_entropy_shard_finish(mine, targets, all, fwd_loss, Tensor(), 1.0, s * per);
        cross_entropy_shard_finish(mine, targets, all, loss, grad, scale, s * per);
        const Tensor want_cols = want_grad.narrow(1, s * per, per).clone();
        if (shards == 1) {
          EXPECT_TRUE(same_bits(loss, want_loss)) << dtype_name(dt);
          EXPECT_TRUE(same_bits(grad, want_cols)) << dtype_name(dt);
          continue;
        }
        // The merge rescales each shard's sum of exponentials once more (exp(m_r - M) in
        // double, and exp(x - m_r) rounded in T before): a few ulps of T.
        const double tol = dt == DType::F64 ? 1e-13 : 2e-6;
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_NEAR(loss.get_flat(i), want_loss.get_flat(i), tol * std::max(1.0, std::fabs(want_loss.get_flat(i))))
              << dtype_name(dt) << " " << shards << " shards, row " << i << " target " << t[size_t(i)];
          EXPECT_EQ(fwd_loss.get_flat(i), loss.get_flat(i));
        }
        EXPECT_LT(rel_error(grad, want_cols), tol) << dtype_name(dt) << " " << shards << " shards, shard " << s;
        for (int64_t i = 0; i < n; ++i) {
          if (t[size_t(i)] != kIgnoreIndex) continue;
          EXPECT_EQ(loss.get_flat(i), 0.0);
          for (int64_t j = 0; j < per; ++j) EXPECT_EQ(grad.get({i, j}), 0.0);
        }
      }
    }
  }
}

TEST(OpVocabShard, CrossEntropyGradientInPlaceAndTheLogitsUntouchedForward) {
  const int64_t n = 5, v = 16, per = 8;
  const Tensor targets = index_tensor({0, 7, 8, 15, kIgnoreIndex}, DType::I64);
  const Tensor logits = random_tensor({n, v}, DType::F32, 3, -2.0, 2.0);
  const Tensor all = Tensor::zeros({2, n, 3}, DType::F64);
  for (int s = 0; s < 2; ++s)
    cross_entropy_shard_stats(logits.narrow(1, s * per, per), targets, all.select(0, s), s * per, v);
  const Tensor mine = logits.narrow(1, per, per).clone();
  const Tensor kept = mine.clone(), loss = Tensor::empty({n}, DType::F32), grad = Tensor::empty({n, per}, DType::F32);
  cross_entropy_shard_finish(mine, targets, all, loss, Tensor(), 1.0, per);
  EXPECT_TRUE(same_bits(mine, kept));
  cross_entropy_shard_finish(mine, targets, all, loss, grad, 2.0, per);
  cross_entropy_shard_finish(mine, targets, all, loss, mine, 2.0, per);  // dlogits == logits
  EXPECT_TRUE(same_bits(mine, grad));
}

TEST(OpVocabShard, CrossEntropyTargetsOutsideTheVocabularyAreErrors) {
  const Tensor logits = random_tensor({2, 4}, DType::F32, 1);
  const Tensor stats = Tensor::zeros({2, 3}, DType::F64);
  // Row 1's target is in no shard of a vocabulary of 8 (this is shard [4, 8)).
  expect_error([&] { cross_entropy_shard_stats(logits, index_tensor({5, 8}, DType::I32), stats, 4, 8); },
               {"target 8 at row 1", "[0, 8)"});
  expect_error([&] { cross_entropy_shard_stats(logits, index_tensor({5, 6}, DType::I32), stats, 6, 8); },
               {"rows [6, 10)", "[0, 8)"});
}

TEST(OpVocabShard, EmbeddingShardsSumToTheWholeLookup) {
  for (int shards : {1, 2, 3, 4}) {
    const int64_t v = 12 * 5, c = 19, per = v / shards;
    const std::vector<int64_t> id_values = boundary_ids(v, shards, false);
    const int64_t n = int64_t(id_values.size());
    const Tensor ids = index_tensor(id_values, DType::I32);
    const Tensor table = random_tensor({v, c}, DType::F32, 11);
    const Tensor want = Tensor::empty({n, c}, DType::F32);
    embedding_forward(ids, table, want);
    const Tensor dout = random_tensor({n, c}, DType::F32, 12);
    const Tensor want_dtable = Tensor::zeros({v, c}, DType::F32);
    embedding_backward(ids, dout, want_dtable);

    const Tensor sum = Tensor::zeros({n, c}, DType::F32);
    for (int s = 0; s < shards; ++s) {
      const Tensor part = Tensor::empty({n, c}, DType::F32);
      embedding_shard_forward(ids, table.narrow(0, s * per, per), part, s * per, v);
      for (int64_t i = 0; i < n * c; ++i) sum.set_flat(i, sum.get_flat(i) + part.get_flat(i));
      const Tensor dtable = Tensor::zeros({per, c}, DType::F32);
      embedding_shard_backward(ids, dout, dtable, s * per, v);
      EXPECT_TRUE(same_bits(dtable, want_dtable.narrow(0, s * per, per).clone())) << shards << " shard " << s;
    }
    EXPECT_TRUE(same_bits(sum, want)) << shards;  // one shard holds each row; the others add zeros
  }
}

TEST(OpVocabShard, EmbeddingIdsOutsideTheVocabularyAreErrors) {
  const Tensor table = random_tensor({4, 3}, DType::F32, 1);
  const Tensor out = Tensor::empty({2, 3}, DType::F32);
  expect_error([&] { embedding_shard_forward(index_tensor({1, 8}, DType::I32), table, out, 4, 8); },
               {"token id 8 at position 1", "[0, 8)"});
  expect_error([&] { embedding_shard_backward(index_tensor({-1, 2}, DType::I64), out, table, 4, 8); },
               {"token id -1 at position 0"});
  expect_error([&] { embedding_shard_forward(index_tensor({1, 2}, DType::I32), table, out, 6, 8); },
               {"rows [6, 10)", "[0, 8)"});
}

}  // namespace
}  // namespace fsdp::test
