// open_token_corpus: the documents of one split's shards as one token stream cut into
// windows of seq_len + 1 tokens at stride seq_len (loader.h).
//
// Layout: doc_start_[g] is the offset in the stream of global document g (documents
// numbered across shards in shard order) and doc_start_[D] the total, a prefix sum built
// once at open. Window i starts at token i * seq_len; the document holding a token offset t
// is the last g with doc_start_[g] <= t (binary search; empty documents share their
// successor's start and are skipped that way), its shard the last s with
// shard_first_doc_[s] <= g. A window may span any number of documents and shards.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <vector>

#include "fsdp/core/error.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
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
                                         const CorpusOptions& o) {
  std::error_code ec;
  const std::string dir = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  const std::optional<ShardManifest> manifest = read_shard_manifest(dir.empty() ? "." : dir);
  std::vector<ShardChecker::Shard> out;
  int64_t without = 0;
  for (const IndexedDataset& shard : shards) {
    ShardChecker::Shard s{&shard, std::nullopt};
    if (manifest) {
      const auto it = manifest->checksums.find(fs::path(shard.prefix()).filename().string());
      if (it != manifest->checksums.end()) s.expected = it->second;
    }
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

class TokenCorpus final : public SampleSource {
 public:
  TokenCorpus(const std::string& path, const std::string& split, int64_t seq_len, int64_t vocab_size,
              const CorpusOptions& o)
      : seq_len_(seq_len), vocab_(vocab_size) {
    FSDP_CHECK(seq_len >= 1, "seq_len must be >= 1, got {}", seq_len);
    FSDP_CHECK(vocab_size >= 1 && vocab_size <= std::numeric_limits<int32_t>::max(), "vocab_size {} out of range",
               vocab_size);
    for (const std::string& prefix : find_shards(path, split)) shards_.emplace_back(prefix);
    checker_ = std::make_unique<ShardChecker>(checked(path, shards_, o), vocab_size, o.rank, o.world,
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
    FSDP_CHECK(total >= seq_len + 1, "token corpus '{}' (split '{}', {} shard(s)) holds {} tokens, fewer than one window of seq_len + 1 = {}",
               path, split, shards_.size(), total, seq_len + 1);
    num_samples_ = (total - 1) / seq_len;
  }

  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_len() const override { return seq_len_; }

  void read_sample(int64_t index, int32_t* window) const override {
    checker_->rethrow_failure();  // a background verification's finding stops the run here
    FSDP_CHECK(index >= 0 && index < num_samples_, "sample {} out of range [0, {})", index, num_samples_);
    const int64_t num_docs = int64_t(doc_start_.size()) - 1;
    int64_t t = index * seq_len_;
    int64_t g = int64_t(std::upper_bound(doc_start_.begin(), doc_start_.end() - 1, t) - doc_start_.begin()) - 1;
    int64_t s = int64_t(std::upper_bound(shard_first_doc_.begin(), shard_first_doc_.end(), g) - shard_first_doc_.begin()) - 1;
    int64_t remaining = seq_len_ + 1;
    while (remaining > 0) {
      FSDP_CHECK(g < num_docs, "window {} runs past the end of the corpus", index);  // cannot happen: N fits
      while (s + 1 < int64_t(shards_.size()) && shard_first_doc_[s + 1] <= g) ++s;
      const int64_t offset = t - doc_start_[g];
      const int64_t count = std::min(remaining, doc_start_[g + 1] - t);
      if (count > 0) {
        const int64_t doc = g - shard_first_doc_[s];
        shards_[s].read(doc, offset, count, window);
        for (int64_t k = 0; k < count; ++k) {
          if (uint32_t(window[k]) >= uint64_t(vocab_)) [[unlikely]]
            FSDP_FAIL("token shard '{}' document {} (token {}): id {} is outside the vocabulary of {} tokens",
                      shards_[s].prefix(), doc, offset + k, window[k], vocab_);
        }
        window += count;
        remaining -= count;
        t += count;
      }
      ++g;
    }
  }

 private:
  int64_t seq_len_, vocab_, num_samples_ = 0;
  std::vector<IndexedDataset> shards_;
  std::vector<int64_t> shard_first_doc_;  // global index of each shard's first document
  std::vector<int64_t> doc_start_;        // stream offset of each global document, then the total
  std::unique_ptr<ShardChecker> checker_;  // declared last: destroyed (joined) before the shards
};

}  // namespace

std::unique_ptr<SampleSource> open_token_corpus(const std::string& path, const std::string& split, int64_t seq_len,
                                                int64_t vocab_size, const CorpusOptions& options) {
  return std::make_unique<TokenCorpus>(path, split, seq_len, vocab_size, options);
}

}  // namespace fsdp::data
