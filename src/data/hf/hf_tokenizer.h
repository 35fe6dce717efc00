// A Hugging Face tokenizer.json, run as the `tokenizers` library runs it: added tokens found
// first, then the normalizer, the pre-tokenizer and the BPE model on the text between them,
// and on request the post-processor's special tokens; decoding through the decoder. The
// pipeline pieces real files use are implemented (see each stage's header); a file using
// anything else is refused at load with the JSON path of what is missing.
//
// Text in is bytes: ill-formed UTF-8 is replaced by U+FFFD first (utf8.h), as Python's
// errors="replace" does before `tokenizers` ever sees it. encode and decode are const and
// safe to call from several threads at once (prepare's workers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::data::hf {

class AddedTokens;
class BpeModel;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;

class HfTokenizer {
 public:
  // `json` is the file's text; `name` (its path) prefixes every error.
  HfTokenizer(const std::string& json, const std::string& name);
  ~HfTokenizer();

  // add_special: the post-processor's tokens around the text (tokenizers' add_special_tokens).
  // parse_special: special added tokens written in the text become their ids.
  void encode(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& out) const;
  // skip_special drops special added tokens (tokenizers' skip_special_tokens). An id that is
  // neither in the model nor an added token throws fsdp::Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // The ids the post-processor puts before and after a text (BOS, EOS, CLS, SEP).
  const std::vector<int32_t>& specials_before() const { return before_; }
  const std::vector<int32_t>& specials_after() const { return after_; }
  bool is_special(int32_t id) const;

 private:
  std::string name_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedTokens> added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<int32_t> before_, after_;
  int64_t vocab_size_ = 0;
};

}  // namespace fsdp::data::hf
