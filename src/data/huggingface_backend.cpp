// A tokenizer.json behind the Tokenizer facade, with BOS and EOS from tokenizer_config.json;
// see tokenizer_backend.h.
#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "hf/hf_tokenizer.h"
#include "tokenizer_backend.h"

namespace fsdp::data {

namespace {

// tokenizer_config.json writes a special token as its content or as an AddedToken object.
std::string token_content(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

class HuggingFaceBackend final : public TokenizerBackend {
 public:
  HuggingFaceBackend(const std::string& json, const std::string& path, const std::string& config,
                     const std::string& config_path)
      : tok_(json, path) {
    const auto& before = tok_.specials_before();
    const auto& after = tok_.specials_after();
    bos_ = before.empty() ? -1 : before.front();
    eos_ = after.empty() ? -1 : after.back();
    if (config.empty()) return;
    nlohmann::json c;
    try {
      c = nlohmann::json::parse(config);
    } catch (const nlohmann::json::parse_error& e) {
      FSDP_FAIL("{}: not JSON (byte {})", config_path, e.byte);
    } catch (const nlohmann::json::exception&) {  // out_of_range: 1e999
      FSDP_FAIL("{}: holds a number too large for a double (e.g. 1e999)", config_path);
    }
    if (!c.is_object()) FSDP_FAIL("{}: expected a JSON object", config_path);
    for (auto [key, slot] : {std::pair{"bos_token", &bos_}, std::pair{"eos_token", &eos_}}) {
      if (!c.contains(key) || c[key].is_null()) continue;
      const std::string content = token_content(c[key]);
      const auto id = tok_.token_to_id(content);
      if (!id) FSDP_FAIL("{}: {} \"{}\" is not a token of {}", config_path, key, content, path);
      *slot = *id;
    }
  }
  int64_t vocab_size() const override { return tok_.vocab_size(); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  void encode(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& out) const override {
    tok_.encode(text, options.add_special, options.parse_special, out);
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    return tok_.decode(ids, skip_special);
  }

 private:
  hf::HfTokenizer tok_;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace

std::unique_ptr<TokenizerBackend> huggingface_backend(const std::string& json, const std::string& path,
                                                      const std::string& config, const std::string& config_path) {
  return std::make_unique<HuggingFaceBackend>(json, path, config, config_path);
}

}  // namespace fsdp::data
