// tokenizer.json's "added_tokens": strings matched in the text before anything else runs, each
// becoming its one id (Llama 3's <|begin_of_text|>, <|eot_id|>, ...), as `tokenizers`'
// AddedVocabulary finds them: leftmost-longest, first the tokens with normalized: false on the
// raw text, then the text between them normalized and searched for the normalized: true ones
// (their content normalized the same way); single_word, lstrip and rstrip honoured.
//
// A special token is matched only when the caller asks (parse_special): text that happens to
// contain "<|eot_id|>" never turns into the control token by default, which is what training
// data and prompts from users need. `tokenizers`' default, encode(text), is parse_special.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe_model.h"
#include "json_node.h"
#include "normalizers.h"
#include "pieces.h"

namespace fsdp::data::hf {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedTokens {
 public:
  AddedTokens(const JsonNode& list, const BpeModel& model, const Normalizer* normalizer);

  // The input as pieces: added tokens found (their ids set) and the normalized text between.
  Pieces extract_and_normalize(std::string_view text, const Normalizer* normalizer, bool parse_special) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  int64_t id_bound() const { return bound_; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents for leftmost-longest search.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
      int32_t token = -1;                                    // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void add(std::string_view pattern, int32_t token);
    // The longest pattern starting at text[i]: (token index, length), or (-1, 0).
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t i) const;
  };
  void split(Piece&& piece, const Trie& trie, bool parse_special, Pieces& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> by_content_;
  Trie raw_, normalized_;
  int64_t bound_ = 0;
};

}  // namespace fsdp::data::hf
