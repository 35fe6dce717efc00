// The tokenizer facade: which file a path names, its hash, and the backend that runs it; see
// fsdp/data/tokenizer.h.
#include "fsdp/data/tokenizer.h"

#include <filesystem>

#include <fmt/format.h>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"
#include "tokenizer_backend.h"

namespace fsdp::data {

namespace fs = std::filesystem;

uint64_t fnv1a64(const void* data, size_t size, uint64_t state) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    state ^= p[i];
    state *= 0x100000001b3ULL;
  }
  return state;
}

std::string resolve_tokenizer_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const fs::path f = fs::path(path) / name;
      if (fs::exists(f, ec)) return f.string();
    }
    FSDP_FAIL("tokenizer folder '{}' holds neither tokenizer.json nor tokenizer.model", path);
  }
  return path;
}

namespace {

std::string read_tokenizer_bytes(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_regular_file(path);  // a FIFO must not hang the run
  } catch (const Error& e) {
    FSDP_FAIL("tokenizer model: {}", e.what());
  }
  if (bytes.empty()) FSDP_FAIL("tokenizer model '{}' is empty", path);
  return bytes;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& path) : path_(resolve_tokenizer_file(path)) {
  const std::string bytes = read_tokenizer_bytes(path_);
  hash_ = fnv1a64(bytes.data(), bytes.size());
  if (fs::path(path_).extension() == ".json") {
    kind_ = Kind::HuggingFace;
    // BOS and EOS come from tokenizer_config.json beside it, which is part of what the
    // tokenizer means: its bytes go into the hash too.
    const fs::path config = fs::path(path_).parent_path() / "tokenizer_config.json";
    std::string config_text;
    std::error_code ec;
    if (fs::exists(config, ec)) {
      config_text = read_tokenizer_bytes(config.string());
      hash_ = fnv1a64(config_text.data(), config_text.size(), hash_);
    }
    backend_ = huggingface_backend(bytes, path_, config_text, config.string());
  } else {
    backend_ = sentencepiece_backend(bytes, path_);
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

int64_t Tokenizer::vocab_size() const { return backend_->vocab_size(); }
int32_t Tokenizer::bos_id() const { return backend_->bos_id(); }
int32_t Tokenizer::eos_id() const { return backend_->eos_id(); }

std::string Tokenizer::content_hash_hex() const { return fmt::format("{:016x}", hash_); }

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const { encode(text, EncodeOptions{}, out); }

void Tokenizer::encode(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& out) const {
  backend_->encode(text, options, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return backend_->decode(ids, skip_special);
}

}  // namespace fsdp::data
