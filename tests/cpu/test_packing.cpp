// Best-fit packing of SFT examples (data/packing.h): every example placed once and whole, no
// window over capacity, few windows; and the packed source's windows, masks and document
// start offsets on a masked corpus; the loader's document starts per token and the targets
// it ignores at each boundary (Note [Document masking] in fsdp/ops/attention.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/loss_mask.h"
#include "fsdp/data/packing.h"
#include "test_util.h"

namespace fsdp {
namespace {

TEST(BestFitPack, PlacesEveryExampleOnceInFewWindows) {
  std::mt19937_64 rng(3);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 500; ++i) lengths.push_back(1 + int64_t(rng() % 300));
  lengths.push_back(700);  // longer than a window: cut, alone
  const data::PackedWindows p = data::best_fit_pack(lengths, 512);
  std::vector<int> seen(lengths.size(), 0);
  int64_t tokens = 0;
  for (int64_t w = 0; w < p.num_windows(); ++w) {
    int64_t used = 0;
    for (int64_t k = p.first[size_t(w)]; k < p.first[size_t(w) + 1]; ++k) {
      const int64_t i = p.examples[size_t(k)];
      seen[size_t(i)] += 1;
      used += std::min<int64_t>(lengths[size_t(i)], 512);
      if (k > p.first[size_t(w)]) EXPECT_LT(p.examples[size_t(k) - 1], i) << "input order within a window";
    }
    EXPECT_LE(used, 512) << "window " << w;
    tokens += used;
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  EXPECT_EQ(tokens, p.placed_tokens);
  EXPECT_EQ(p.cut_examples, 1);
  // Within 11/9 of the lower bound (total tokens / capacity) plus a window: best-fit
  // decreasing's guarantee; in practice it is far closer.
  const int64_t bound = (tokens + 511) / 512;
  EXPECT_LE(p.num_windows(), bound * 11 / 9 + 1);
  EXPECT_LT(p.padding_share(), 0.05) << p.num_windows() << " windows for " << bound;
  EXPECT_EQ(data::best_fit_pack(lengths, 512).examples, p.examples);  // deterministic
}

TEST(PackedExamples, WholeExamplesWithTheirMasksAndStartOffsets) {
  // Document d is d + 1 repeated (2 + d % 17 tokens), its last token trained.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fsdp_packed_examples";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<int64_t> lengths;
  {
    data::IndexedDatasetWriter w((dir / "train_00000").string(), 1024);
    data::LossMaskWriter m((dir / "train_00000").string());
    for (int d = 0; d < 40; ++d) {
      const int64_t n = 2 + d % 17;
      lengths.push_back(n);
      const std::vector<int32_t> ids(size_t(n), d + 1);
      std::vector<uint8_t> mask(size_t(n), 0);
      mask.back() = 1;
      w.add_document(ids.data(), n);
      m.add(mask.data(), n);
    }
    w.finish();
    m.finish();
  }
  const int64_t seq = 31;  // windows of 32 tokens
  const auto packed = data::open_packed_examples(dir.string(), "train", seq, 1024);
  EXPECT_EQ(packed->num_samples(), data::best_fit_pack(lengths, seq + 1).num_windows());
  std::vector<int32_t> window(seq + 1), starts;
  std::vector<uint8_t> mask(seq + 1);
  std::vector<int> seen(lengths.size(), 0);
  for (int64_t w = 0; w < packed->num_samples(); ++w) {
    packed->read_masked_sample(w, window.data(), mask.data());
    packed->document_starts(w, starts);
    ASSERT_FALSE(starts.empty());
    EXPECT_EQ(starts[0], 0);
    int64_t end = 0;
    for (size_t k = 0; k < starts.size(); ++k) {
      const int32_t id = window[size_t(starts[k])];
      ASSERT_GE(id, 1);
      const int64_t n = lengths[size_t(id - 1)];
      if (k + 1 < starts.size()) EXPECT_EQ(starts[k + 1] - starts[k], n) << "window " << w;
      for (int64_t t = 0; t < n; ++t) {
        EXPECT_EQ(window[size_t(starts[k] + t)], id);
        EXPECT_EQ(mask[size_t(starts[k] + t)], t == n - 1 ? 1 : 0);
      }
      seen[size_t(id - 1)] += 1;
      end = starts[k] + n;
    }
    for (int64_t t = end; t <= seq; ++t) EXPECT_TRUE(window[size_t(t)] == 0 && mask[size_t(t)] == 0) << "pad " << t;
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  EXPECT_LT(packed->padding_share(), 0.1);
}

TEST(PackedExamples, TheLoaderGivesDocumentStartsAndNoCrossingTargets) {
  // Every token trained: only the document boundaries (and the pads) ignore targets.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fsdp_packed_loader";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    data::IndexedDatasetWriter w((dir / "train_00000").string(), 1024);
    data::LossMaskWriter m((dir / "train_00000").string());
    for (int d = 0; d < 12; ++d) {
      const int64_t n = 1 + d % 7;
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < n; ++t) ids.push_back(int32_t(50 * (d + 1) + t));
      const std::vector<uint8_t> mask(size_t(n), 1);
      w.add_document(ids.data(), n);
      m.add(mask.data(), n);
    }
    w.finish();
    m.finish();
  }
  const int64_t seq = 11;
  std::shared_ptr<const data::PackedSource> packed = data::open_packed_examples(dir.string(), "train", seq, 1024);
  data::LoaderOptions o;
  o.seq_len = seq;
  o.shuffle = false;
  o.num_workers = 0;
  data::Loader loader(packed, o);
  ASSERT_TRUE(loader.documents());
  const Tensor ids = Tensor::empty({seq}, DType::I32), targets = Tensor::empty({seq}, DType::I32),
               doc_start = Tensor::empty({seq}, DType::I32);
  EXPECT_ERROR_MENTIONS(loader.next(ids, targets), "needs a doc_start tensor");
  std::vector<int32_t> window(seq + 1), starts;
  for (int64_t w = 0; w < packed->num_samples(); ++w) {
    loader.next(ids, targets, doc_start);
    packed->read_sample(w, window.data());
    packed->document_starts(w, starts);
    for (int64_t t = 0; t < seq; ++t) {
      // The last start at or before t, and the target crossing into the next document ignored.
      int32_t want = 0;
      for (int32_t s : starts)
        if (s <= t) want = s;
      EXPECT_EQ(doc_start.data<int32_t>()[t], want) << "window " << w << " token " << t;
      const bool crosses = std::find(starts.begin(), starts.end(), int32_t(t + 1)) != starts.end();
      const bool pad = window[size_t(t) + 1] == 0;
      EXPECT_EQ(targets.data<int32_t>()[t], crosses || pad ? data::kIgnoredTarget : window[size_t(t) + 1])
          << "window " << w << " token " << t;
    }
  }
}

}  // namespace
}  // namespace fsdp
