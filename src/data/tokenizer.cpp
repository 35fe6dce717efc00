#include "fsdp/data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <iterator>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::data {

uint64_t fnv1a64(const void* data, size_t size, uint64_t state) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state ^= p[i];
    state *= 0x100000001b3ULL;
  }
  return state;
}

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  std::string bytes;
  try {
    bytes = read_regular_file(model_path);  // a FIFO must not hang the run
  } catch (const Error& e) {
    FSDP_FAIL("tokenizer model: {}", e.what());
  }
  if (bytes.empty()) FSDP_FAIL("tokenizer model '{}' is empty", model_path);
  hash_ = fnv1a64(bytes.data(), bytes.size());
  const auto status = sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    FSDP_FAIL("tokenizer model '{}' does not load as a sentencepiece model: {}", model_path, status.ToString());
  }
  vocab_size_ = sp_->GetPieceSize();
  FSDP_CHECK(vocab_size_ > 0, "tokenizer model '{}' has an empty vocabulary", model_path);
  bos_id_ = sp_->bos_id();  // sentencepiece already answers -1 for a disabled piece
  eos_id_ = sp_->eos_id();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::string Tokenizer::content_hash_hex() const { return fmt::format("{:016x}", hash_); }

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) FSDP_FAIL("tokenizer '{}' failed to encode: {}", path_, status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v) FSDP_CHECK(id >= 0 && id < vocab_size_, "token id {} outside the vocabulary [0, {}) of '{}'", id, vocab_size_, path_);
  std::string text;
  const auto status = sp_->Decode(v, &text);
  if (!status.ok()) FSDP_FAIL("tokenizer '{}' failed to decode: {}", path_, status.ToString());
  return text;
}

}  // namespace fsdp::data
