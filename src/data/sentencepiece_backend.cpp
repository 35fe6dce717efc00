// A sentencepiece model behind the Tokenizer facade; see tokenizer_backend.h.
#include <sentencepiece_processor.h>

#include "fsdp/core/error.h"
#include "tokenizer_backend.h"

namespace fsdp::data {

namespace {

class SentencePieceBackend final : public TokenizerBackend {
 public:
  SentencePieceBackend(const std::string& bytes, const std::string& path) : path_(path) {
    const auto status = sp_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      FSDP_FAIL("tokenizer model '{}' does not load as a sentencepiece model: {}", path, status.ToString());
    vocab_size_ = sp_.GetPieceSize();
    FSDP_CHECK(vocab_size_ > 0, "tokenizer model '{}' has an empty vocabulary", path);
  }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return sp_.bos_id(); }  // -1 for a disabled piece
  int32_t eos_id() const override { return sp_.eos_id(); }
  void encode(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) FSDP_FAIL("tokenizer '{}' failed to encode: {}", path_, status.ToString());
    // As transformers' LlamaTokenizer: BOS before the text.
    if (options.add_special && sp_.bos_id() >= 0) out.push_back(sp_.bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (int32_t id : ids) {
      FSDP_CHECK(id >= 0 && id < vocab_size_, "token id {} outside the vocabulary [0, {}) of '{}'", id, vocab_size_, path_);
      // sentencepiece renders control pieces (BOS, EOS) as nothing: skipping is its only way.
      (void)skip_special;
      v.push_back(id);
    }
    std::string text;
    const auto status = sp_.Decode(v, &text);
    if (!status.ok()) FSDP_FAIL("tokenizer '{}' failed to decode: {}", path_, status.ToString());
    return text;
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<TokenizerBackend> sentencepiece_backend(const std::string& bytes, const std::string& path) {
  return std::make_unique<SentencePieceBackend>(bytes, path);
}

}  // namespace fsdp::data
