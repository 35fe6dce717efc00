// Document masking in the model (Note [Document masking] in fsdp/ops/attention.h): a packed
// window of examples, attention and RoPE restarting at each, gives every example what it
// gets alone through the unpacked model, with no external reference needed: the same
// per-token logits and losses, and gradients (of every parameter) equal to the sum of the
// examples' own. Also under every activation checkpointing mode (the recompute sees the same
// documents) and with the rows of a micro-batch holding different layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/param_init.h"
#include "fsdp/ops/attention.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/elementwise.h"
#include "test_util.h"

namespace fsdp {
namespace {

using test::rel_error;

// Small enough for seconds, with GQA and two key tiles' worth of positions per window.
model::LlamaConfig small() { return model::LlamaConfig{53, 32, 40, 3, 4, 2, 80, 10000.0, 1e-5}; }

struct Example {
  std::vector<int32_t> tokens;
};

// A seeded example of n tokens; every other position's target is masked when `masked`
// (an SFT prompt), the rest trained.
Example example(int64_t n, uint64_t seed) {
  Example e;
  for (int64_t i = 0; i < n; ++i) e.tokens.push_back(int32_t((seed * 31 + uint64_t(i) * 17 + 3) % 53));
  return e;
}

struct PassResult {
  Tensor logits, losses;  // [N, V], [N]
  model::LossSum loss;
  std::vector<Tensor> grads;
};

// One forward/backward of B rows of T tokens. rows[b] holds its examples back to back
// (padded with token 0 to T, the pads' targets ignored); with `documents` the rows' example
// offsets are the documents, and the target crossing into the next example is ignored.
PassResult run(const model::Llama& shape, const std::vector<std::vector<Example>>& rows, int64_t T, bool documents,
        model::ActivationCheckpointing ac = {}) {
  model::Llama llama(shape.config());
  model::LocalParams params(llama.units());
  for (int u = 0; u < params.num_units(); ++u) model::init_unit(llama.units()[size_t(u)], u, 7, 0.3, params.params(u));
  const int64_t B = int64_t(rows.size());
  model::LlamaActivations act(llama.config(), B, T, DType::F32, Device::cpu(), ac);
  std::vector<int32_t> starts;
  std::vector<int64_t> first{0};
  for (int64_t b = 0; b < B; ++b) {
    int64_t at = 0;
    for (const Example& e : rows[size_t(b)]) {
      starts.push_back(int32_t(at));
      const int64_t n = int64_t(e.tokens.size());
      for (int64_t i = 0; i < n; ++i) {
        act.ids.set({b * T + at + i}, e.tokens[size_t(i)]);
        act.targets.set({b * T + at + i}, i + 1 < n ? e.tokens[size_t(i) + 1] : kIgnoreIndex);
      }
      at += n;
    }
    for (; at < T; ++at) {
      act.ids.set({b * T + at}, 0);
      act.targets.set({b * T + at}, kIgnoreIndex);
    }
    first.push_back(int64_t(starts.size()));
  }
  act.documents = documents;
  if (documents) act.doc_start.copy_(make_doc_start(starts, first, T));
  PassResult r;
  r.loss = llama.forward_backward(act, params, 1.0);
  r.logits = act.logits.clone();
  r.losses = act.losses.clone();
  for (int u = 0; u < params.num_units(); ++u) r.grads.push_back(params.grads(u).clone());
  return r;
}

// float32 throughout; the packed and the alone runs differ in the order of a few sums (the
// attention's key tiles, the GEMMs' row counts, the gradients summed over one window or over
// four runs), so they agree to float rounding amplified through 3 layers: measured logits
// <= 4.2e-7 and gradients <= 1.4e-6 relative; 1e-5, the bound.
constexpr double kTol = 1e-5;

void expect_packed_equals_alone(const std::vector<Example>& window, int64_t T, const std::string& what,
                                model::ActivationCheckpointing ac = {}) {
  const model::Llama shape(small());
  const PassResult packed = run(shape, {window}, T, /*documents=*/true, ac);
  std::vector<Tensor> summed;
  int64_t at = 0, trained = 0;
  for (size_t k = 0; k < window.size(); ++k) {
    const int64_t n = int64_t(window[k].tokens.size());
    const PassResult alone = run(shape, {{window[k]}}, n, /*documents=*/false, ac);
    EXPECT_LT(rel_error(packed.logits.narrow(0, at, n), alone.logits), kTol) << what << ": example " << k;
    for (int64_t i = 0; i + 1 < n; ++i)
      EXPECT_NEAR(packed.losses.get({at + i}), alone.losses.get({i}), kTol * (1 + alone.losses.get({i})))
          << what << ": example " << k << " token " << i;
    trained += alone.loss.tokens;
    if (summed.empty()) {
      for (const Tensor& g : alone.grads) summed.push_back(g.clone());
    } else {
      for (size_t u = 0; u < summed.size(); ++u) add(summed[u], alone.grads[u], summed[u]);
    }
    at += n;
  }
  EXPECT_EQ(packed.loss.tokens, trained) << what;
  for (size_t u = 0; u < summed.size(); ++u) EXPECT_LT(rel_error(packed.grads[u], summed[u]), kTol) << what << ": unit " << u;
}

TEST(PackedDocuments, AWindowOfExamplesEqualsEachAlone) {
  // Four examples of uneven lengths, one of a single token, the window padded.
  expect_packed_equals_alone({example(23, 1), example(1, 2), example(30, 3), example(14, 4)}, 72, "four examples");
  // Three examples filling the window exactly.
  expect_packed_equals_alone({example(40, 5), example(9, 6), example(23, 7)}, 72, "three, full");
}

TEST(PackedDocuments, EveryCheckpointingModeSeesTheSameDocuments) {
  using model::Recompute;
  const model::Llama shape(small());
  const std::vector<Example> window{example(20, 11), example(33, 12), example(11, 13)};
  const PassResult none = run(shape, {window}, 64, true);
  for (Recompute mode : {Recompute::Full, Recompute::Selective}) {
    model::ActivationCheckpointing ac;
    ac.mode = mode;
    const PassResult got = run(shape, {window}, 64, true, ac);
    EXPECT_EQ(got.loss.sum, none.loss.sum);
    for (size_t u = 0; u < none.grads.size(); ++u)
      EXPECT_EQ(std::memcmp(got.grads[u].data_ptr(), none.grads[u].data_ptr(), none.grads[u].nbytes()), 0)
          << "mode " << int(mode) << " unit " << u;
  }
}

// Rows of one micro-batch with different layouts: each row's documents are its own (row 1
// of the packed batch must equal its window alone, whatever row 0 holds).
TEST(PackedDocuments, RowsOfABatchKeepTheirOwnLayouts) {
  const model::Llama shape(small());
  const std::vector<Example> a{example(10, 21), example(30, 22)}, b{example(3, 23), example(3, 24), example(34, 25)};
  const PassResult both = run(shape, {a, b}, 40, true);
  const PassResult row1 = run(shape, {b}, 40, true);
  EXPECT_LT(rel_error(both.logits.narrow(0, 40, 40), row1.logits), kTol);
  // Without documents the last example sees the ones before it: the check above can fail.
  const PassResult crossing = run(shape, {b}, 40, false);
  EXPECT_GT(rel_error(crossing.logits.narrow(0, 6, 34), row1.logits.narrow(0, 6, 34)), 1e-3);
}

}  // namespace
}  // namespace fsdp
