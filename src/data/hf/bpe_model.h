// tokenizer.json's "model" of type BPE, as `tokenizers` runs it on one pre-tokenized word:
// the word's characters looked up in the vocabulary (a character that is missing becomes its
// <0xXX> byte tokens under byte_fallback, else the unk token, consecutive ones fused under
// fuse_unk, else nothing), then the merges applied lowest rank first (leftmost first among
// equal ranks) until none applies. ignore_merges: a word that is itself in the vocabulary is
// that one token. continuing_subword_prefix and end_of_word_suffix as `tokenizers` adds them.
// Dropout is refused (training-time only). Words and their ids are cached per thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json_node.h"

namespace fsdp::data::hf {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  explicit BpeModel(const JsonNode& model);

  // Appends the ids of one word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token of an id of the vocabulary, or nullptr.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id.
  int64_t id_bound() const { return id_bound_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  Vocab vocab_;
  // Tokens by id, in a map: a file's ids may leave holes, and one id of 2^31 - 1 in a dense
  // table once asked for 68 GB (fuzz_tokenizer_json).
  std::unordered_map<int32_t, std::string> tokens_;
  int64_t id_bound_ = 0;
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id)
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens (-1 when missing), for byte_fallback
  uint64_t cache_key_;  // distinguishes this model's entries in the per-thread cache
};

}  // namespace fsdp::data::hf
