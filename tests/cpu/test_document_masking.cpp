// data.document_masking (Note [Document masking] in fsdp/ops/attention.h) on pretraining
// windows: the loader splits each window after every EOS token (the token after one starts a
// new document), gives each token its document's start and ignores the target that crosses
// a boundary; the model on such a window equals its documents run separately; the key's
// default, its refusals (synthetic data, a manifest without an EOS id) and a run on shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/local_trainer.h"
#include "fsdp/config/config.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/param_init.h"
#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp {
namespace {

using test::rel_error;

constexpr int32_t kEos = 2;

// Fixed windows of seq_len + 1 tokens, no mask, no documents of their own.
class Windows final : public data::SampleSource {
 public:
  explicit Windows(std::vector<std::vector<int32_t>> w) : w_(std::move(w)) {}
  int64_t num_samples() const override { return int64_t(w_.size()); }
  int64_t seq_len() const override { return int64_t(w_[0].size()) - 1; }
  void read_sample(int64_t i, int32_t* window) const override {
    std::copy(w_[size_t(i)].begin(), w_[size_t(i)].end(), window);
  }

 private:
  std::vector<std::vector<int32_t>> w_;
};

struct Batch {
  Tensor ids, targets, doc_start;
};

Batch load(const std::vector<std::vector<int32_t>>& windows, int32_t split_after) {
  auto source = std::make_shared<Windows>(windows);
  data::LoaderOptions o;
  o.micro_batch = int64_t(windows.size());
  o.seq_len = source->seq_len();
  o.shuffle = false;
  o.num_workers = 0;
  o.split_after = split_after;
  data::Loader loader(source, o);
  const int64_t n = o.micro_batch * o.seq_len;
  Batch b{Tensor::empty({n}, DType::I32), Tensor::empty({n}, DType::I32), Tensor::empty({n}, DType::I32)};
  EXPECT_EQ(loader.documents(), split_after >= 0);
  EXPECT_EQ(loader.masked(), split_after >= 0);
  loader.next(b.ids, b.targets, split_after >= 0 ? b.doc_start : Tensor());
  return b;
}

std::vector<int32_t> values(const Tensor& t) {
  std::vector<int32_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.data<int32_t>()[i];
  return v;
}

TEST(DocumentMasking, TheLoaderSplitsAfterEachEos) {
  // Window of 9 + 1: documents [0, 3), [3, 4), [4, 9); the EOS at 8 would start one at 9,
  // the last target's token, so that target is ignored too.
  const std::vector<int32_t> w{5, 6, kEos, kEos, 7, 8, 9, 10, kEos, 11};
  const Batch b = load({w}, kEos);
  EXPECT_EQ(values(b.doc_start), (std::vector<int32_t>{0, 0, 0, 3, 4, 4, 4, 4, 4}));
  const int32_t x = data::kIgnoredTarget;
  EXPECT_EQ(values(b.targets), (std::vector<int32_t>{6, kEos, x, x, 8, 9, 10, kEos, x}));
  // Without document masking: one document, every target trained.
  const Batch plain = load({w}, -1);
  EXPECT_EQ(values(plain.targets), (std::vector<int32_t>(w.begin() + 1, w.end())));
}

// The model on the loader's window equals each document alone (the unpacked model on it,
// its last target ignored): per-token logits within float rounding (1e-5, as
// test_packed_documents.cpp).
TEST(DocumentMasking, AWindowWithAnEosEqualsItsHalvesAlone) {
  const model::LlamaConfig c{37, 32, 40, 2, 4, 2, 40, 10000.0, 1e-5};
  std::vector<int32_t> w;
  for (int i = 0; i < 13; ++i) w.push_back(3 + (i * 7) % 30);
  w.push_back(kEos);  // the first document ends at 13
  for (int i = 0; i < 19; ++i) w.push_back(3 + (i * 11 + 5) % 30);
  const int64_t T = int64_t(w.size()) - 1;  // 32
  const Batch b = load({w}, kEos);
  auto forward = [&](const Tensor& ids, const Tensor& targets, const Tensor& doc_start) {
    model::Llama llama(c);
    model::LocalParams params(llama.units());
    for (int u = 0; u < params.num_units(); ++u) model::init_unit(llama.units()[size_t(u)], u, 3, 0.3, params.params(u));
    model::LlamaActivations act(c, 1, ids.numel(), DType::F32, Device::cpu());
    act.ids.copy_(ids);
    act.targets.copy_(targets);
    act.documents = doc_start.defined();
    if (act.documents) act.doc_start.copy_(doc_start.reshape({1, ids.numel()}));
    llama.forward(act, params);
    return act.logits.clone();
  };
  const Tensor packed = forward(b.ids, b.targets, b.doc_start);
  for (const auto& [a, n] : {std::pair<int64_t, int64_t>{0, 14}, std::pair<int64_t, int64_t>{14, T - 14}}) {
    Tensor targets = b.targets.narrow(0, a, n).clone();
    const Tensor alone = forward(b.ids.narrow(0, a, n).clone(), targets, Tensor());
    EXPECT_LT(rel_error(packed.narrow(0, a, n), alone), 1e-5) << "document at " << a;
  }
  // Without the split the second document sees the first: far from alone.
  const Tensor crossing = forward(b.ids, b.targets, Tensor());
  const Tensor second = forward(b.ids.narrow(0, 14, T - 14).clone(), b.targets.narrow(0, 14, T - 14).clone(), Tensor());
  EXPECT_GT(rel_error(crossing.narrow(0, 14, T - 14), second), 1e-3);
}

config::Config masking_config(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"data.source=shards", "data.path=" + dir, "data.document_masking=true",
                                "train.eval_every=0"};
  o.insert(o.end(), extra.begin(), extra.end());
  return test::ckpt_config(test::scratch("docmask_run"), o);
}

// A pretraining corpus of documents ending in EOS, its manifest recording eos_id (or not).
std::string eos_corpus(const std::string& name, bool with_eos_id) {
  const std::string dir = test::scratch(name);
  data::IndexedDatasetWriter w(dir + "/train_00000", 256);
  for (int d = 0; d < 40; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 3 + d % 9; ++i) doc.push_back(3 + (d * 13 + i * 7) % 250);
    doc.push_back(kEos);
    w.add_document(doc.data(), int64_t(doc.size()));
  }
  w.finish();
  nlohmann::json m = {{"format", "megatron-mmap-v1"}, {"vocab_size", 256}};
  m["eos_id"] = with_eos_id ? nlohmann::json(kEos) : nlohmann::json(nullptr);
  std::ofstream(dir + "/manifest.json") << m.dump();
  return dir;
}

TEST(DocumentMasking, ConfigKeyDefaultSetAndRefusals) {
  EXPECT_FALSE(config::Config{}.data.document_masking);
  const config::Config on =
      config::load_config_string("data:\n  source: shards\n  path: x\n  document_masking: true\n", "test.yaml", {});
  EXPECT_TRUE(on.data.document_masking);
  EXPECT_TRUE(config::load_config_string("data:\n  path: x\n", "t", {"data.document_masking=true"}).data.document_masking);
  EXPECT_ERROR_MENTIONS(test::LocalTrainer t(test::ckpt_config(test::scratch("docmask_synthetic"),
                                                               {"data.document_masking=true"})),
                        "key 'data.document_masking' is true, but data.source is synthetic");
  const std::string no_eos = eos_corpus("docmask_no_eos", false);
  EXPECT_ERROR_MENTIONS(test::LocalTrainer t(masking_config(no_eos, {})), "records no EOS id (eos_id null)");
}

// On shards with an EOS id: the run trains, and the targets crossing documents carry no loss.
TEST(DocumentMasking, TrainsOnShardsWithoutCrossDocumentTargets) {
  const std::string dir = eos_corpus("docmask_eos", true);
  test::LocalTrainer on(masking_config(dir, {}));
  test::LocalTrainer off(masking_config(dir, {"data.document_masking=false"}));
  const obs::StepMetrics a = on->train_step(), b = off->train_step();
  EXPECT_EQ(b.trained_tokens, b.tokens);
  EXPECT_LT(a.trained_tokens, a.tokens);
  EXPECT_GT(a.trained_tokens, a.tokens / 2);
  EXPECT_TRUE(std::isfinite(a.loss) && a.loss > 0);
  EXPECT_NE(a.loss, b.loss);
}

}  // namespace
}  // namespace fsdp
