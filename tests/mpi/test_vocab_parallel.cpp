// The vocabulary-parallel embedding and cross-entropy (model/vocab_parallel.h) through real
// collectives, under mpiexec with 1, 2 and 4 ranks forming one tensor group: against the
// unsplit ops on the same random inputs, which every rank computes whole for itself. Ids
// and targets sit at every shard boundary, some targets are ignored, and the loss and
// every gradient are compared; the embedding is exact (each row has one owner, the others
// add zeros in the reduce-scatter), the cross-entropy within a few ulps (the merge of the
// shards' sums of exponentials).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../cpu/test_util.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/model/vocab_parallel.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/embedding.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

using test::random_tensor;

struct Group {
  dist::ProcessGroups groups;
  std::unique_ptr<CommTensorGroup> tensor;
};

Group whole_world_tensor_group() {
  dist::ProcessGroups& world = test::world_groups();
  Group g;
  g.groups = dist::split_process_groups(world, dist::MeshSpec{world.world->size(), 0});
  g.tensor = std::make_unique<CommTensorGroup>(*g.groups.tensor);
  return g;
}

// Every rank's vocabulary boundaries (first, last, next), ignored targets, padded with
// random ids to a multiple of the group size.
std::vector<int64_t> ids_at_boundaries(int64_t vocab, int ranks, int64_t multiple, bool ignored) {
  std::vector<int64_t> ids;
  const int64_t per = vocab / ranks;
  for (int r = 0; r < ranks; ++r) {
    ids.push_back(r * per);
    ids.push_back(r * per + per - 1);
  }
  ids.push_back(vocab - 1);
  if (ignored) ids.push_back(kIgnoreIndex);
  for (int64_t i = 0; int64_t(ids.size()) % multiple != 0 || ids.size() < 12; ++i) {
    ids.push_back(ignored && i % 5 == 2 ? kIgnoreIndex : (i * 37 + 11) % vocab);
  }
  return ids;
}

TEST(VocabParallel, CrossEntropyLossAndGradientEqualTheUnsplitOp) {
  Group g = whole_world_tensor_group();
  const int T = g.tensor->size(), r = g.tensor->rank();
  const int64_t vocab = 96, per = vocab / T;
  const std::vector<int64_t> t = ids_at_boundaries(vocab, T, 1, true);
  const int64_t n = int64_t(t.size());
  const Tensor targets = test::index_tensor(t, DType::I32);
  const Tensor logits = random_tensor({n, vocab}, DType::F32, 21, -5.0, 5.0);  // the same on every rank
  const double scale = 1.0 / 7;
  const Tensor want_loss = Tensor::empty({n}, DType::F32), want_grad = Tensor::empty({n, vocab}, DType::F32);
  cross_entropy_forward_backward(logits, targets, want_loss, want_grad, scale);

  model::VocabParallelStats stats(n, T, Device::cpu());
  const Tensor mine = logits.narrow(1, r * per, per).clone();
  const Tensor loss = Tensor::empty({n}, DType::F32);
  model::vocab_parallel_cross_entropy(mine, targets, loss, mine, scale, vocab, *g.tensor, stats);  // in place
  for (int64_t i = 0; i < n; ++i) {
    const double w = want_loss.get_flat(i);
    if (t[size_t(i)] == kIgnoreIndex) {
      EXPECT_EQ(loss.get_flat(i), 0.0) << i;
    } else {
      EXPECT_NEAR(loss.get_flat(i), w, 2e-6 * std::max(1.0, std::fabs(w))) << "row " << i << " target " << t[size_t(i)];
    }
  }
  EXPECT_LT(test::rel_error(mine, want_grad.narrow(1, r * per, per).clone()), 2e-6);
  // Every rank holds the same losses, to the bit (the merge runs in rank order everywhere).
  const Tensor every = Tensor::empty({int64_t(T) * n}, DType::F32);
  g.tensor->all_gather(loss, every);
  for (int q = 0; q < T; ++q) EXPECT_TRUE(test::same_bits(every.narrow(0, q * n, n).clone(), loss)) << "rank " << q;
}

TEST(VocabParallel, EmbeddingForwardAndBackwardEqualTheUnsplitOp) {
  Group g = whole_world_tensor_group();
  const int T = g.tensor->size(), r = g.tensor->rank();
  const int64_t vocab = 48, c = 10, per = vocab / T;
  const std::vector<int64_t> id_values = ids_at_boundaries(vocab, T, T, false);
  const int64_t n = int64_t(id_values.size()), rows = n / T;
  const Tensor ids = test::index_tensor(id_values, DType::I32);
  const Tensor table = random_tensor({vocab, c}, DType::F32, 31);
  const Tensor want = Tensor::empty({n, c}, DType::F32);
  embedding_forward(ids, table, want);

  const Tensor partial = Tensor::empty({n, c}, DType::F32), out = Tensor::empty({rows, c}, DType::F32);
  model::vocab_parallel_embedding_forward(ids, table.narrow(0, r * per, per).clone(), vocab, *g.tensor, partial,
                                          out);
  EXPECT_TRUE(test::same_bits(out, want.narrow(0, r * rows, rows).clone()));

  const Tensor dout = random_tensor({n, c}, DType::F32, 32);
  const Tensor want_dtable = Tensor::zeros({vocab, c}, DType::F32);
  embedding_backward(ids, dout, want_dtable);
  const Tensor dtable = Tensor::zeros({per, c}, DType::F32), full = Tensor::empty({n, c}, DType::F32);
  model::vocab_parallel_embedding_backward(ids, dout.narrow(0, r * rows, rows).clone(), dtable, vocab, *g.tensor,
                                           full);
  EXPECT_TRUE(test::same_bits(dtable, want_dtable.narrow(0, r * per, per).clone()));
}

}  // namespace
}  // namespace fsdp
