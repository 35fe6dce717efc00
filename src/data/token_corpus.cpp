// The documents of one split's shards as samples (loader.h): open_token_corpus packs them
// into one token stream cut into windows of seq_len + 1 tokens at stride seq_len;
// open_example_rows gives each document a row of its own, padded (data.packing: false);
// open_packed_examples packs whole examples best-fit into padded windows (SFT data).
// Either carries the shards' loss masks (loss_mask.h) where they have them.
//
// Layout: doc_start_[g] is the offset in the stream of global document g (documents
// numbered across shards in shard order) and doc_start_[D] the total, a prefix sum built
// once at open. Window i starts at token i * seq_len; the document holding a token offset t
// is the last g with doc_start_[g] <= t (binary search; empty documents share their
// successor's start and are skipped that way), its shard the last s with
// shard_first_doc_[s] <= g. A window may span any number of documents and shards.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "fsdp/core/error.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/loss_mask.h"
#include "fsdp/data/packing.h"
#include "fsdp/data/shard_check.h"
#include "fsdp/data/shard_manifest.h"

namespace fsdp::data {
namespace {

namespace fs = std::filesystem;

// The shard prefixes of `split` under `path` (a directory), or `path` itself when it is a
// shard prefix (path.idx exists).
// What to run when the shards are missing: the demo's script for the demo corpus (the
// configs/tiny*.yaml path), `fsdp_train prepare` for anything else.
std::string how_to_make(const std::string& path) {
  if (path.find("data/demo") != std::string::npos)
    return "make the demo corpus with `bash scripts/demo_corpus.sh` (or run `bash scripts/demo.sh`)";
  return fmt::format("make them with `fsdp_train prepare --tokenizer tokenizer.model --output {} <text or jsonl files>`",
                     path);
}

std::vector<std::string> find_shards(const std::string& path, const std::string& split) {
  std::vector<std::string> prefixes;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string head = split + "_";
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".idx" && name.size() > head.size() + 4 && name.compare(0, head.size(), head) == 0)
        prefixes.push_back((entry.path().parent_path() / entry.path().stem()).string());
    }
    FSDP_CHECK(!ec, "cannot list token shard directory '{}': {}", path, ec.message());
    // Another split than train: the corpus is there and was prepared without it, so running
    // the same `prepare` again is no remedy (its caller says what is).
    FSDP_CHECK(!prefixes.empty(), "no token shards for split '{}' in '{}' (expected {}/{}_*.idx){}", split, path, path,
               split, split == "train" ? "; " + how_to_make(path) : std::string());
    std::sort(prefixes.begin(), prefixes.end());
  } else {
    FSDP_CHECK(fs::exists(path + ".idx", ec),
               "no token shards at '{}': neither a directory holding {}_*.idx nor a shard prefix with '{}.idx'; {}", path,
               split, path, how_to_make(path));
    prefixes.push_back(path);
  }
  return prefixes;
}

// The shards' checksums from the manifest.json beside them (a directory's, or a shard
// prefix's parent's); none for shards it does not list or when there is no manifest.
std::vector<ShardChecker::Shard> checked(const std::string& path, const std::vector<IndexedDataset>& shards,
                                         const std::vector<std::unique_ptr<LossMask>>& masks, const CorpusOptions& o) {
  std::error_code ec;
  const std::string dir = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  const std::optional<ShardManifest> manifest = read_shard_manifest(dir.empty() ? "." : dir);
  std::vector<ShardChecker::Shard> out;
  int64_t without = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const IndexedDataset& shard = shards[i];
    ShardChecker::Shard s{&shard, std::nullopt, masks[i].get()};
    if (manifest) {
      const auto it = manifest->checksums.find(fs::path(shard.prefix()).filename().string());
      if (it != manifest->checksums.end()) s.expected = it->second;
    }
    FSDP_CHECK(!(s.expected && s.expected->has_mask) || s.mask != nullptr,
               "loss mask {}.mask is missing: manifest.json records one for shard {} (SFT data without its masks "
               "would train on every token)",
               shard.prefix(), shard.prefix());
    without += s.expected ? 0 : 1;
    out.push_back(s);
  }
  if (without > 0 && o.note) {
    o.note(fmt::format("token shards {}: {} of {} shard(s) have no checksum in a manifest.json (shards from "
                       "Megatron-LM or NeMo carry none): their bytes are not verified, their token ids are",
                       path, without, shards.size()));
  }
  return out;
}

// One split's shards, their masks and verification, and where every document starts.
class ShardSet {
 public:
  ShardSet(const std::string& path, const std::string& split, int64_t vocab_size, const CorpusOptions& o)
      : vocab_(vocab_size) {
    FSDP_CHECK(vocab_size >= 1 && vocab_size <= std::numeric_limits<int32_t>::max(), "vocab_size {} out of range",
               vocab_size);
    for (const std::string& prefix : find_shards(path, split)) {
      shards_.emplace_back(prefix);
      masks_.push_back(has_loss_mask(prefix) ? std::make_unique<LossMask>(prefix, shards_.back().num_tokens()) : nullptr);
      any_mask_ = any_mask_ || masks_.back() != nullptr;
    }
    checker_ = std::make_unique<ShardChecker>(checked(path, shards_, masks_, o), vocab_size, o.rank, o.world,
                                              o.sync_check_bytes);
    int64_t total = 0;
    for (const IndexedDataset& shard : shards_) {
      shard_first_doc_.push_back(int64_t(doc_start_.size()));
      for (int64_t d = 0; d < shard.num_documents(); ++d) {
        doc_start_.push_back(total);
        total += shard.document_size(d);
      }
    }
    doc_start_.push_back(total);
  }

  int64_t total_tokens() const { return doc_start_.back(); }
  int64_t num_documents() const { return int64_t(doc_start_.size()) - 1; }
  int64_t doc_start(int64_t g) const { return doc_start_[size_t(g)]; }
  bool any_mask() const { return any_mask_; }
  // The global document holding stream offset t (empty documents are skipped that way).
  int64_t document_at(int64_t t) const {
    return int64_t(std::upper_bound(doc_start_.begin(), doc_start_.end() - 1, t) - doc_start_.begin()) - 1;
  }

  // Tokens [t, t + count) of the stream (and their mask bytes when mask is not null; 1 for a
  // shard without a mask), checked against the vocabulary.
  void read(int64_t t, int64_t count, int32_t* window, uint8_t* mask) const {
    checker_->rethrow_failure();  // a background verification's finding stops the run here
    int64_t g = document_at(t);
    int64_t s = int64_t(std::upper_bound(shard_first_doc_.begin(), shard_first_doc_.end(), g) - shard_first_doc_.begin()) - 1;
    while (count > 0) {
      FSDP_CHECK(g < num_documents(), "a read runs past the end of the corpus");  // cannot happen: callers bound it
      while (s + 1 < int64_t(shards_.size()) && shard_first_doc_[s + 1] <= g) ++s;
      const int64_t offset = t - doc_start_[g];
      const int64_t n = std::min(count, doc_start_[g + 1] - t);
      if (n > 0) {
        const int64_t doc = g - shard_first_doc_[s];
        shards_[s].read(doc, offset, n, window);
        for (int64_t k = 0; k < n; ++k) {
          if (uint32_t(window[k]) >= uint64_t(vocab_)) [[unlikely]]
            FSDP_FAIL("token shard '{}' document {} (token {}): id {} is outside the vocabulary of {} tokens",
                      shards_[s].prefix(), doc, offset + k, window[k], vocab_);
        }
        if (mask != nullptr) {
          if (masks_[s]) {
            masks_[s]->read(t - doc_start_[shard_first_doc_[s]], n, mask);
          } else {
            std::memset(mask, 1, size_t(n));
          }
          mask += n;
        }
        window += n;
        count -= n;
        t += n;
      }
      ++g;
    }
  }

 private:
  int64_t vocab_;
  bool any_mask_ = false;
  std::vector<IndexedDataset> shards_;
  std::vector<std::unique_ptr<LossMask>> masks_;  // per shard; null without a sidecar
  std::vector<int64_t> shard_first_doc_;  // global index of each shard's first document
  std::vector<int64_t> doc_start_;        // stream offset of each global document, then the total
  std::unique_ptr<ShardChecker> checker_;  // declared last: destroyed (joined) before the shards
};

void check_seq_len(int64_t seq_len) { FSDP_CHECK(seq_len >= 1, "seq_len must be >= 1, got {}", seq_len); }

class TokenCorpus final : public SampleSource {
 public:
  TokenCorpus(std::shared_ptr<const ShardSet> set, const std::string& path, const std::string& split, int64_t seq_len)
      : seq_len_(seq_len), set_(std::move(set)) {
    const int64_t total = set_->total_tokens();
    FSDP_CHECK(total >= seq_len + 1, "token corpus '{}' (split '{}') holds {} tokens, fewer than one window of seq_len + 1 = {}",
               path, split, total, seq_len + 1);
    num_samples_ = (total - 1) / seq_len;
  }

  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_len() const override { return seq_len_; }
  bool has_mask() const override { return set_->any_mask(); }

  void read_sample(int64_t index, int32_t* window) const override { read_masked(index, window, nullptr); }
  void read_masked_sample(int64_t index, int32_t* window, uint8_t* mask) const override {
    read_masked(index, window, mask);
  }

 private:
  void read_masked(int64_t index, int32_t* window, uint8_t* mask) const {
    FSDP_CHECK(index >= 0 && index < num_samples_, "sample {} out of range [0, {})", index, num_samples_);
    set_->read(index * seq_len_, seq_len_ + 1, window, mask);
  }

  int64_t seq_len_, num_samples_ = 0;
  std::shared_ptr<const ShardSet> set_;
};

// read_sample of a source whose windows always carry a mask (its pads, at least): the
// window read with its mask, the mask dropped.
void read_dropping_mask(const SampleSource& source, int64_t index, int32_t* window) {
  std::vector<uint8_t> mask(size_t(source.seq_len() + 1));
  source.read_masked_sample(index, window, mask.data());
}

// Note [Example rows]
// Without packing every non-empty document is a row: its tokens from the start, cut at
// seq_len + 1, then token 0 up to the window, masked. Causal attention keeps the pads from
// changing anything before them, and their targets carry no loss, so a row trains exactly
// what the example alone would. The rows are the documents in shard order; the loader
// shuffles them like windows.
class ExampleRows final : public SampleSource {
 public:
  ExampleRows(std::shared_ptr<const ShardSet> set, const std::string& path, const std::string& split, int64_t seq_len,
              const CorpusOptions& o)
      : seq_len_(seq_len), set_(std::move(set)) {
    int64_t cut = 0;
    for (int64_t g = 0; g < set_->num_documents(); ++g) {
      const int64_t size = set_->doc_start(g + 1) - set_->doc_start(g);
      if (size == 0) continue;
      rows_.push_back(g);
      cut += size > seq_len + 1 ? 1 : 0;
    }
    FSDP_CHECK(!rows_.empty(), "token corpus '{}' (split '{}') holds no documents", path, split);
    if (cut > 0 && o.note) {
      o.note(fmt::format("{} (split '{}'): {} of {} examples are longer than seq_len + 1 = {} tokens: without "
                         "packing each is cut there (prepare --max-seq-len cuts or drops them ahead)",
                         path, split, cut, rows_.size(), seq_len + 1));
    }
  }

  int64_t num_samples() const override { return int64_t(rows_.size()); }
  int64_t seq_len() const override { return seq_len_; }
  bool has_mask() const override { return true; }  // the pads, at least

  void read_sample(int64_t index, int32_t* window) const override { read_dropping_mask(*this, index, window); }
  void read_masked_sample(int64_t index, int32_t* window, uint8_t* mask) const override {
    FSDP_CHECK(index >= 0 && index < num_samples(), "sample {} out of range [0, {})", index, num_samples());
    const int64_t g = rows_[size_t(index)], start = set_->doc_start(g);
    const int64_t n = std::min(seq_len_ + 1, set_->doc_start(g + 1) - start);
    set_->read(start, n, window, mask);
    std::fill(window + n, window + seq_len_ + 1, 0);
    std::fill(mask + n, mask + seq_len_ + 1, uint8_t(0));
  }

 private:
  int64_t seq_len_;
  std::shared_ptr<const ShardSet> set_;
  std::vector<int64_t> rows_;  // the global document of each row
};

// Note [Packed examples]
// SFT data with packing: whole examples placed into windows of seq_len + 1 tokens by
// best_fit_pack (packing.h), the rest of a window padded with token 0 and masked. Window w
// holds its examples back to back in input order; document_starts gives their offsets, and
// attention and RoPE keep the examples apart (Note [Document masking] in
// fsdp/ops/attention.h): what this saves over the stream windows is the examples cut in
// two at window edges, and over one row per example most of the padding.
class PackedExamples final : public PackedSource {
 public:
  PackedExamples(std::shared_ptr<const ShardSet> set, const std::string& path, const std::string& split,
                 int64_t seq_len, const CorpusOptions& o)
      : seq_len_(seq_len), set_(std::move(set)) {
    std::vector<int64_t> lengths;
    for (int64_t g = 0; g < set_->num_documents(); ++g) {
      const int64_t size = set_->doc_start(g + 1) - set_->doc_start(g);
      if (size == 0) continue;
      docs_.push_back(g);
      lengths.push_back(size);
    }
    FSDP_CHECK(!docs_.empty(), "token corpus '{}' (split '{}') holds no documents", path, split);
    packs_ = best_fit_pack(lengths, seq_len + 1);
    if (o.note) {
      o.note(fmt::format("{} (split '{}'): {} examples packed best-fit into {} windows of seq_len + 1 = {} tokens, "
                         "{:.1f}% padding{}",
                         path, split, docs_.size(), packs_.num_windows(), seq_len + 1, 100.0 * packs_.padding_share(),
                         packs_.cut_examples > 0 ? fmt::format("; {} longer examples cut to a window",
                                                               packs_.cut_examples)
                                                 : std::string()));
    }
  }

  int64_t num_samples() const override { return packs_.num_windows(); }
  int64_t seq_len() const override { return seq_len_; }
  bool has_mask() const override { return true; }  // the pads, at least

  void read_sample(int64_t index, int32_t* window) const override { read_dropping_mask(*this, index, window); }
  void read_masked_sample(int64_t index, int32_t* window, uint8_t* mask) const override {
    FSDP_CHECK(index >= 0 && index < num_samples(), "sample {} out of range [0, {})", index, num_samples());
    int64_t at = 0;
    for (int64_t k = packs_.first[size_t(index)]; k < packs_.first[size_t(index) + 1]; ++k) {
      const int64_t g = docs_[size_t(packs_.examples[size_t(k)])], start = set_->doc_start(g);
      const int64_t n = std::min(seq_len_ + 1 - at, set_->doc_start(g + 1) - start);
      set_->read(start, n, window + at, mask + at);
      at += n;
    }
    std::fill(window + at, window + seq_len_ + 1, 0);
    std::fill(mask + at, mask + seq_len_ + 1, uint8_t(0));
  }
  void document_starts(int64_t index, std::vector<int32_t>& out) const override {
    out.clear();
    int64_t at = 0;
    for (int64_t k = packs_.first[size_t(index)]; k < packs_.first[size_t(index) + 1]; ++k) {
      out.push_back(int32_t(at));
      const int64_t g = docs_[size_t(packs_.examples[size_t(k)])];
      at += std::min(seq_len_ + 1, set_->doc_start(g + 1) - set_->doc_start(g));
    }
  }
  double padding_share() const override { return packs_.padding_share(); }

 private:
  int64_t seq_len_;
  std::shared_ptr<const ShardSet> set_;
  std::vector<int64_t> docs_;  // the global document of each example (non-empty ones)
  PackedWindows packs_;        // over indices into docs_
};

std::shared_ptr<const ShardSet> open_set(const std::string& path, const std::string& split, int64_t seq_len,
                                         int64_t vocab_size, const CorpusOptions& o) {
  check_seq_len(seq_len);
  return std::make_shared<const ShardSet>(path, split, vocab_size, o);
}

}  // namespace

std::unique_ptr<SampleSource> open_token_corpus(const std::string& path, const std::string& split, int64_t seq_len,
                                                int64_t vocab_size, const CorpusOptions& options) {
  return std::make_unique<TokenCorpus>(open_set(path, split, seq_len, vocab_size, options), path, split, seq_len);
}

std::unique_ptr<SampleSource> open_example_rows(const std::string& path, const std::string& split, int64_t seq_len,
                                                int64_t vocab_size, const CorpusOptions& options) {
  return std::make_unique<ExampleRows>(open_set(path, split, seq_len, vocab_size, options), path, split, seq_len,
                                       options);
}

std::unique_ptr<PackedSource> open_packed_examples(const std::string& path, const std::string& split, int64_t seq_len,
                                                   int64_t vocab_size, const CorpusOptions& options) {
  return std::make_unique<PackedExamples>(open_set(path, split, seq_len, vocab_size, options), path, split, seq_len,
                                          options);
}

std::unique_ptr<SampleSource> open_corpus(const std::string& path, const std::string& split, int64_t seq_len,
                                          int64_t vocab_size, bool packing, const CorpusOptions& options) {
  std::shared_ptr<const ShardSet> set = open_set(path, split, seq_len, vocab_size, options);
  if (!packing) return std::make_unique<ExampleRows>(std::move(set), path, split, seq_len, options);
  if (set->any_mask()) return std::make_unique<PackedExamples>(std::move(set), path, split, seq_len, options);
  return std::make_unique<TokenCorpus>(std::move(set), path, split, seq_len);
}

}  // namespace fsdp::data
