// The dense Llama under tensor and sequence parallelism (model/tensor_parallel.h,
// Note [Sequence parallelism]) against one process, without FSDP: under mpiexec with 1,
// 2 and 4 ranks forming one tensor group, each rank builds its share of the model (its
// slices of every matrix and of the vocabulary, its rows of the residual stream) with the
// same seeded weights as the whole model, and one forward and backward over the same
// micro-batch gives
//   - the same per-token losses as one process, on every rank (within 1e-5 relative:
//     float32 sums in another order), and every rank the same bits;
//   - every gradient: a split slot's slices, stacked in rank order, the whole slot's
//     gradient; a whole slot's (norm weights: each rank saw its rows) summed over the
//     group, the whole slot's gradient (within 1e-5 norm-wise);
//   - the same bits again when run twice, and under full and selective activation
//     checkpointing (the recompute runs the collectives again, on the same values).
// GQA (8 heads, 4 key/value heads: T = 4 puts one GQA group of 2 query heads on each
// rank) and MHA, tied and untied embeddings, ignored targets; and rows of packed documents
// (Note [Document masking] in fsdp/ops/attention.h): each rank's heads attend over the
// gathered sequence, so the whole doc_start applies on every rank as in one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "../cpu/test_util.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/param_init.h"
#include "fsdp/ops/attention.h"  // make_doc_start
#include "fsdp/ops/cross_entropy.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16;
constexpr double kGradScale = 1.0 / 29;

model::LlamaConfig shape(bool gqa, bool tied) {
  model::LlamaConfig c;
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = gqa ? 8 : 4;
  c.num_kv_heads = 4;
  c.max_seq_len = kSeq;
  c.tie_word_embeddings = tied;
  return c;
}

struct Pass {
  std::vector<model::UnitLayout> units;
  Tensor losses;
  std::vector<Tensor> grads;  // per unit, this rank's layout
};

// One forward and backward of the fixed micro-batch on a model split over `group` (null:
// the whole model in this process).
Pass run(model::LlamaConfig cfg, model::TensorGroup* group, model::Recompute mode = model::Recompute::None,
         bool documents = false) {
  cfg.tensor_parallel = group != nullptr ? group->size() : 1;
  model::Llama llama(cfg, DType::F32, Device::cpu(), {}, 0, group);
  model::LocalParams params(llama.units());
  for (int u = 0; u < params.num_units(); ++u) model::init_unit(llama.units()[size_t(u)], u, 7, 0.2, params.params(u));
  model::ActivationCheckpointing ac;
  ac.mode = mode;
  model::LlamaActivations act(llama.config(), kBatch, kSeq, DType::F32, Device::cpu(), ac);
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    act.ids.set_flat(i, double((i * 37 + 5) % cfg.vocab_size));
    // Every vocabulary shard's first and last row (of T = 2 and 4) come first; some are ignored.
    static constexpr int64_t kEdges[] = {0, 31, 32, 63, 64, 95, 96, 127};
    const int64_t t = i < 8 ? kEdges[i] : i % 11 == 3 ? kIgnoreIndex : (i * 29 + 7) % cfg.vocab_size;
    act.targets.set_flat(i, double(t));
  }
  if (documents) {
    // Row 0: documents at 0, 5, 9; row 1: a one-token document, then one to the end.
    const std::vector<int32_t> starts{0, 5, 9, 0, 1, 2};
    const std::vector<int64_t> first{0, 3, 6};
    act.documents = true;
    act.doc_start.copy_(make_doc_start(starts, first, kSeq));
  }
  llama.forward_backward(act, params, kGradScale);
  Pass p;
  p.units = llama.units();
  p.losses = act.losses.clone();
  for (int u = 0; u < params.num_units(); ++u) p.grads.push_back(params.grads(u).clone());
  return p;
}

// Slot `s`'s whole gradient from every rank's share: slices stacked by their place in the
// whole parameter (as a whole parameter is), whole slots summed.
Tensor whole_gradient(const model::ParamSlot& s, const Tensor& local_grads, model::TensorGroup& group) {
  if (!s.tp.replicated()) return test::whole_parameter(s, local_grads, &group);
  const Tensor mine = local_grads.narrow(0, s.offset, s.numel).clone();
  group.all_reduce(mine);
  return mine;
}

void expect_same_bits(const Pass& a, const Pass& b, const std::string& what) {
  EXPECT_TRUE(test::same_bits(a.losses, b.losses)) << what << ": losses";
  for (size_t u = 0; u < a.grads.size(); ++u)
    EXPECT_EQ(std::memcmp(a.grads[u].data_ptr(), b.grads[u].data_ptr(), a.grads[u].nbytes()), 0)
        << what << ": unit " << u;
}

void expect_equal_to_one_process(bool gqa, bool tied, bool documents = false) {
  dist::ProcessGroups& world = test::world_groups();
  const model::LlamaConfig cfg = shape(gqa, tied);
  const dist::ProcessGroups groups = dist::split_process_groups(world, dist::MeshSpec{world.world->size(), 0});
  CommTensorGroup group(*groups.tensor);
  const Pass want = run(cfg, nullptr, model::Recompute::None, documents);
  const Pass got = run(cfg, &group, model::Recompute::None, documents);
  if (documents) EXPECT_FALSE(test::same_bits(want.losses, run(cfg, nullptr).losses)) << "documents changed nothing";
  const int64_t n = kBatch * kSeq;
  for (int64_t i = 0; i < n; ++i) {
    const double w = want.losses.get_flat(i);
    EXPECT_NEAR(got.losses.get_flat(i), w, 1e-5 * std::max(1.0, std::fabs(w))) << "token " << i;
  }
  const Tensor every = Tensor::empty({int64_t(group.size()) * n}, DType::F32);
  group.all_gather(got.losses, every);
  for (int r = 0; r < group.size(); ++r)
    EXPECT_TRUE(test::same_bits(every.narrow(0, r * n, n).clone(), got.losses)) << "tensor rank " << r;
  for (size_t u = 0; u < got.units.size(); ++u) {
    for (const model::ParamSlot& s : got.units[u].params) {
      const Tensor whole = whole_gradient(s, got.grads[u], group);
      const model::ParamSlot& ref = want.units[u].slot(s.name);
      EXPECT_EQ(whole.numel(), ref.numel) << s.name;
      EXPECT_EQ(s.whole_offset, ref.offset) << s.name;
      EXPECT_LT(test::rel_norm_error(whole, want.grads[u].narrow(0, ref.offset, ref.numel).clone()), 1e-5)
          << s.name;
    }
  }
  expect_same_bits(got, run(cfg, &group, model::Recompute::None, documents), "run twice");
  expect_same_bits(got, run(cfg, &group, model::Recompute::Full, documents), "full recompute");
  expect_same_bits(got, run(cfg, &group, model::Recompute::Selective, documents), "selective recompute");
}

TEST(TensorParallelModel, GqaUntiedEqualsOneProcess) { expect_equal_to_one_process(true, false); }
TEST(TensorParallelModel, PackedDocumentsEqualOneProcess) { expect_equal_to_one_process(true, false, true); }
TEST(TensorParallelModel, GqaTiedEqualsOneProcess) { expect_equal_to_one_process(true, true); }
TEST(TensorParallelModel, MhaUntiedEqualsOneProcess) { expect_equal_to_one_process(false, false); }
TEST(TensorParallelModel, MhaTiedEqualsOneProcess) { expect_equal_to_one_process(false, true); }

}  // namespace
}  // namespace fsdp
