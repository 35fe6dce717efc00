// Best-fit packing of whole examples into windows, for SFT data (data.packing: true over
// shards with loss masks; token_corpus.cpp).
//
// Best-fit decreasing: examples by length, longest first (ties by index), each into the
// open window whose free space is the smallest that still holds it, else into a new window.
// It wastes few tokens (within 11/9 of the optimal window count, Johnson 1973; in practice a
// percent or two of padding on chat data), is deterministic, and never splits an example:
// one longer than a window is cut to it and fills a window alone. Within a window the
// examples keep their input order. Each window's document start offsets are the prefix sums
// of its examples' lengths (cu_seqlens, what document-masked attention takes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fsdp/data/loader.h"

namespace fsdp::data {

struct PackedWindows {
  int64_t capacity = 0;
  std::vector<int64_t> examples;  // example indices, window by window
  std::vector<int64_t> first;     // window w holds examples[first[w], first[w + 1]); size windows + 1
  int64_t placed_tokens = 0;      // tokens of the placed examples (after cuts)
  int64_t cut_examples = 0;       // examples longer than a window, cut to it

  int64_t num_windows() const { return int64_t(first.size()) - 1; }
  // The share of the windows' tokens that are padding.
  double padding_share() const;
};

// `lengths[i]` tokens of example i (> 0) into windows of `capacity` tokens.
PackedWindows best_fit_pack(std::span<const int64_t> lengths, int64_t capacity);

// A split's shards with whole examples packed best-fit into windows of seq_len + 1 tokens,
// each padded with token 0 and the pads masked (Note [Packed examples], token_corpus.cpp).
// Its examples are the window's documents (has_documents): attention and RoPE keep them
// apart (Note [Document masking] in fsdp/ops/attention.h).
class PackedSource : public SampleSource {
 public:
  bool has_documents() const override { return true; }
  virtual double padding_share() const = 0;
};
std::unique_ptr<PackedSource> open_packed_examples(const std::string& path, const std::string& split, int64_t seq_len,
                                                   int64_t vocab_size, const CorpusOptions& options = {});

// What training reads (data.packing): without packing one example per row
// (open_example_rows); with packing the packed examples when the shards carry loss masks
// (SFT data), else the token stream (open_token_corpus). The shards are opened once.
std::unique_ptr<SampleSource> open_corpus(const std::string& path, const std::string& split, int64_t seq_len,
                                          int64_t vocab_size, bool packing, const CorpusOptions& options = {});

}  // namespace fsdp::data
