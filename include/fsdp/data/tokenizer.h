// A thin wrapper over sentencepiece's SentencePieceProcessor: the one tokenizer prepare,
// the loader and generate share. Loading reads the .model file once, hashes its bytes
// (FNV-1a 64, recorded in the prepare manifest so a loader can tell that shards were made
// with another tokenizer) and parses it; either failing throws fsdp::Error naming the file.
// encode/decode are const and safe to call from several threads at once (sentencepiece's
// processor keeps no mutable state while encoding), which prepare's workers rely on.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fsdp::data {

// FNV-1a 64 of bytes, continuing from `state` (the offset basis by default).
uint64_t fnv1a64(const void* data, size_t size, uint64_t state = 0xcbf29ce484222325ULL);

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const std::string& path() const { return path_; }
  int64_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }  // -1 when the model defines none
  int32_t eos_id() const { return eos_id_; }  // -1 when the model defines none
  uint64_t content_hash() const { return hash_; }
  std::string content_hash_hex() const;  // 16 lower-case hex digits

  // Pieces only: no BOS/EOS (callers add them where a document starts and ends).
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends to out
  std::string decode(std::span<const int32_t> ids) const;  // ids outside the vocab throw

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int64_t vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1;
  uint64_t hash_ = 0;
};

}  // namespace fsdp::data
