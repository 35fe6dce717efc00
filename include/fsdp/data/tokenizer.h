// The one tokenizer prepare, the loader, generate and tokenize share, over two kinds of file,
// picked by what the path holds:
//   tokenizer.model   a sentencepiece model (Llama 2, CodeLlama, Mixtral)
//   tokenizer.json    a Hugging Face tokenizer (Llama 3, Qwen, Mistral-Nemo, GPT-2, ...), run
//                     token for token as the `tokenizers` library runs it (data/hf/)
//   a folder          its tokenizer.json, else its tokenizer.model (a Hugging Face model
//                     folder: transformers' AutoTokenizer also prefers tokenizer.json)
// Loading reads the file once and hashes its bytes (FNV-1a 64, recorded in the prepare
// manifest so a loader can tell that shards were made with another tokenizer); a file that
// cannot be read or parsed throws fsdp::Error naming it. BOS and EOS: sentencepiece's own
// pieces; for tokenizer.json, tokenizer_config.json's bos_token and eos_token beside it, else
// the post-processor's leading special token as BOS and no EOS. encode/decode are const and
// safe to call from several threads at once (prepare's workers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::data {

// FNV-1a 64 of bytes, continuing from `state` (the offset basis by default).
uint64_t fnv1a64(const void* data, size_t size, uint64_t state = 0xcbf29ce484222325ULL);

struct EncodeOptions {
  // The special tokens the tokenizer puts around a text (tokenizers' add_special_tokens:
  // Llama 3's <|begin_of_text|>; sentencepiece's BOS).
  bool add_special = false;
  // Special tokens written in the text ("<|eot_id|>") become their ids. Off by default, so
  // text from a corpus or a user never turns into control tokens; a rendered chat template
  // needs it on. sentencepiece never matches control pieces in text.
  bool parse_special = false;
};

class TokenizerBackend;

class Tokenizer {
 public:
  enum class Kind { SentencePiece, HuggingFace };

  // A tokenizer.model, a tokenizer.json, or a folder holding either.
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  Kind kind() const { return kind_; }
  const std::string& path() const { return path_; }  // the file loaded
  int64_t vocab_size() const;
  int32_t bos_id() const;  // -1 when there is none
  int32_t eos_id() const;  // -1 when there is none
  uint64_t content_hash() const { return hash_; }
  std::string content_hash_hex() const;  // 16 lower-case hex digits

  // Pieces only: no BOS/EOS (callers add them where a document starts and ends), and special
  // tokens in the text are text.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends to out
  void encode(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& out) const;
  // skip_special drops BOS/EOS and the other special tokens from the text. Ids outside the
  // vocabulary throw.
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

 private:
  Kind kind_ = Kind::SentencePiece;
  std::string path_;
  std::unique_ptr<TokenizerBackend> backend_;
  uint64_t hash_ = 0;
};

// Which file `path` names as a tokenizer (the rules above), or an fsdp::Error saying what was
// looked for.
std::string resolve_tokenizer_file(const std::string& path);

}  // namespace fsdp::data
