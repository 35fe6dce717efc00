// What the Tokenizer facade (fsdp/data/tokenizer.h) asks of each kind of tokenizer file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/data/tokenizer.h"

namespace fsdp::data {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual void encode(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& out) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;
};

// `bytes` is the file's content; `path` names it in errors.
std::unique_ptr<TokenizerBackend> sentencepiece_backend(const std::string& bytes, const std::string& path);
// `config` is tokenizer_config.json's text beside it ("" when there is none).
std::unique_ptr<TokenizerBackend> huggingface_backend(const std::string& json, const std::string& path,
                                                      const std::string& config, const std::string& config_path);

}  // namespace fsdp::data
