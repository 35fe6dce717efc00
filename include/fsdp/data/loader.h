// The streaming loader: turns a source of fixed-length samples (token windows) into this
// rank's micro-batches, in a global order that never depends on the number of ranks.
//
// Global order: global position p = 0, 1, 2, ... maps to epoch e = p / N and sample
// perm_e[p % N], where perm_e is a seeded Fisher-Yates shuffle of the N samples keyed by
// (seed, e) (the identity when shuffle is off), so every epoch has its own order.
// Micro-batch j of rank r (j counts micro-batches from the start of training) covers the
// global positions
//     step = j / accum, a = j % accum,
//     first = step * G + (a * world + r) * micro,   G = micro * accum * world
// i.e. exactly the trainer's layout (trainer.h): the union over ranks of one step is the
// global batch [step * G, (step + 1) * G), with no overlap.
// State: the next micro-batch index j (plus the fixed seed): seek(j) restores it exactly.
// Prefetch: num_workers threads fill the next `prefetch` micro-batches into a ring of
// preallocated buffers while the step computes; results are bit-identical to prefetch 0.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"

namespace fsdp::data {

// The target a masked token becomes: the loss ignores it (ops' kIgnoreIndex, PyTorch's
// ignore_index; data cannot include ops, the trainer asserts they agree).
inline constexpr int32_t kIgnoredTarget = -100;

// Samples of seq_len + 1 tokens: ids are tokens [0, seq_len), targets [1, seq_len].
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_len() const = 0;
  // Writes sample `index` (0 <= index < num_samples) as seq_len + 1 int32 tokens. Must be
  // thread-safe (workers call it concurrently). Errors name the shard and document.
  virtual void read_sample(int64_t index, int32_t* window) const = 0;
  // Whether samples carry a loss mask (SFT data, or padded rows); without one every target
  // is trained.
  virtual bool has_mask() const { return false; }
  // read_sample, and the window's seq_len + 1 mask bytes (1 = the token is a trained target).
  virtual void read_masked_sample(int64_t index, int32_t* window, uint8_t* mask) const;
  // Whether a window holds several documents that must not see each other (packed SFT
  // examples): document_starts then gives window `index`'s start offsets (the first 0,
  // increasing, within [0, seq_len]; cu_seqlens without the end). Without: one document.
  virtual bool has_documents() const { return false; }
  virtual void document_starts(int64_t index, std::vector<int32_t>& out) const;
};

// How a token corpus verifies its shards (data/shard_check.h).
struct CorpusOptions {
  int rank = 0, world = 1;  // this rank verifies shards i with i % world == rank
  // A corpus whose .bin files total at most this many bytes is verified when opened; a
  // larger one in the background while training goes on.
  int64_t sync_check_bytes = int64_t(256) << 20;
  // Told, once, what the verification covers (shards without checksums), for the log.
  std::function<void(const std::string&)> note;
};

// Documents of the shards <dir>/<split>_*.idx (sorted by name; a single <prefix>.idx when
// `path` names a shard prefix instead of a directory), concatenated in order into one
// token stream and cut into windows of seq_len + 1 tokens at stride seq_len (consecutive
// windows share one token, as Megatron's GPT dataset does): N = (tokens - 1) / seq_len.
// Every shard is verified once (Note [Shard verification]: its checksums from the
// manifest.json beside it, every id against the vocabulary); any token id >= vocab_size
// read is an error naming the shard, document and id.
// A shard with a loss-mask sidecar (loss_mask.h) gives masked samples; a manifest that records
// a mask its shard lacks is an error naming it.
std::unique_ptr<SampleSource> open_token_corpus(const std::string& path, const std::string& split, int64_t seq_len,
                                                int64_t vocab_size, const CorpusOptions& options = {});

// The same shards without packing (data.packing: false): sample i is document i alone, its
// first seq_len + 1 tokens (a longer one is cut, counted in the note), padded to the window
// with token 0, the pads masked out. N = the number of non-empty documents.
std::unique_ptr<SampleSource> open_example_rows(const std::string& path, const std::string& split, int64_t seq_len,
                                                int64_t vocab_size, const CorpusOptions& options = {});

struct LoaderOptions {
  int64_t micro_batch = 1;
  int64_t seq_len = 1;
  int64_t accum = 1;
  int rank = 0, world = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  int num_workers = 1;  // 0: read on the calling thread
  int prefetch = 2;     // micro-batches prepared ahead (0: none)
  // data.document_masking: >= 0 splits every window into documents after each token of this
  // id (the tokenizer's EOS, Llama 3 style); -1: only the source's own documents.
  int32_t split_after = -1;
  std::string name = "loader";  // its workers' trace tracks: "<name> worker <i>"
};

class Loader {
 public:
  Loader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options);
  ~Loader();

  // Writes this rank's next micro-batch into ids / targets (int32, [micro_batch * seq_len],
  // CPU, contiguous) and advances. Blocks only if the workers are behind. A masked source's
  // untrained targets are kIgnoredTarget.
  // With documents() the micro-batch's doc_start too (int32 [micro_batch * seq_len]: for
  // each token the position in its row where its document begins, Note [Document masking]
  // in fsdp/ops/attention.h), required then; and the target that would cross a document
  // boundary (the last token of a document predicting the next one's first) is
  // kIgnoredTarget: no token is trained on what it cannot see.
  void next(const Tensor& ids, const Tensor& targets, const Tensor& doc_start = Tensor());
  // Whether targets may be kIgnoredTarget (the source has a mask, or documents): else every
  // target of a micro-batch is trained and its count is known without looking.
  bool masked() const;
  // Whether rows hold documents that attention and RoPE must keep apart (packed SFT
  // examples, or LoaderOptions::split_after).
  bool documents() const;
  // The global position of the first sample of micro-batch j of this rank.
  int64_t first_position(int64_t j) const;
  int64_t position() const;      // index of the next micro-batch (the state to checkpoint)
  void seek(int64_t position);   // restart from there (drops prefetched work)
  // Restart so that the next step's global batch begins at `global_position` (the number of
  // samples every earlier step consumed in total): how a checkpoint resumes on another world
  // size or batch layout, where micro-batch indices no longer map to the same samples.
  // Micro-batch indices (position(), seek()) then count from that point.
  void seek_global(int64_t global_position);
  double wait_seconds() const;   // total time next() waited for data
  int64_t epoch() const;         // epoch of the next sample

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::data
