// The tokenizer.json pipeline; see hf_tokenizer.h.
#include "hf_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "added_tokens.h"
#include "bpe_model.h"
#include "decoders.h"
#include "fsdp/core/error.h"
#include "json_node.h"
#include "normalizers.h"
#include "post_processors.h"
#include "pre_tokenizers.h"
#include "utf8.h"

namespace fsdp::data::hf {

HfTokenizer::HfTokenizer(const std::string& json, const std::string& name) : name_(name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    // The byte offset, not the library's text: the file is not JSON at all.
    FSDP_FAIL("{}: not JSON (byte {})", name, e.byte);
  } catch (const nlohmann::json::exception&) {
    // out_of_range: a number past a double's range (1e999), found by fuzz_tokenizer_json.
    FSDP_FAIL("{}: holds a number too large for a double (e.g. 1e999)", name);
  }
  const JsonNode root(j, name_);
  if (!j.is_object()) root.fail("expected a JSON object (a Hugging Face tokenizer.json)");
  const JsonNode model = root.at("model");
  const std::string type = model.string_or("type", "BPE");
  if (type != "BPE") model.at("type").unsupported(type);
  if (const auto t = root.get("truncation")) t->fail("truncation is not supported (set it to null)");
  if (const auto p = root.get("padding")) p->fail("padding is not supported (set it to null)");

  model_ = std::make_unique<BpeModel>(model);
  normalizer_ = root.has("normalizer") ? make_normalizer(root.at("normalizer")) : nullptr;
  pre_tokenizer_ = root.has("pre_tokenizer") ? make_pre_tokenizer(root.at("pre_tokenizer")) : nullptr;
  post_processor_ = root.has("post_processor") ? make_post_processor(root.at("post_processor")) : nullptr;
  decoder_ = root.has("decoder") ? make_decoder(root.at("decoder")) : nullptr;
  const nlohmann::json empty = nlohmann::json::array();
  added_ = std::make_unique<AddedTokens>(root.has("added_tokens") ? root.at("added_tokens") : JsonNode(empty, name_, "added_tokens"),
                                         *model_, normalizer_.get());
  vocab_size_ = std::max(model_->id_bound(), added_->id_bound());
  if (post_processor_) post_processor_->around(before_, after_);
  // Every id the post-processor adds must be a token: an id in a hole of the vocabulary (found
  // by fuzz_tokenizer_json) would be encoded and then fail to decode. tokenizers loads such a
  // file and drops the id when decoding; refusing it names the broken entry instead.
  for (const std::vector<int32_t>* ids : {&before_, &after_}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab_size_)
        root.at("post_processor").fail("special token id " + std::to_string(id) + " is outside the vocabulary");
      if (added_->by_id(id) == nullptr && model_->id_to_token(id) == nullptr)
        root.at("post_processor").fail("special token id " + std::to_string(id) + " is no token's id (the vocabulary has no entry for it)");
    }
  }
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::encode(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& out) const {
  std::string valid;
  if (!is_valid_utf8(text)) {
    valid = to_valid_utf8(text);
    text = valid;
  }
  Pieces pieces = added_->extract_and_normalize(text, normalizer_.get(), parse_special);
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
  if (add_special) out.insert(out.end(), before_.begin(), before_.end());
  for (const Piece& p : pieces) {
    if (p.id >= 0) out.push_back(p.id);
    else model_->tokenize(p.text, out);
  }
  if (add_special) out.insert(out.end(), after_.begin(), after_.end());
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_->id_of(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_->by_id(id)) return a->content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_->by_id(id);
  return a != nullptr && a->special;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = added_->by_id(id)) {
      if (!(skip_special && a->special)) tokens.push_back(a->content);
      continue;
    }
    const std::string* t = model_->id_to_token(id);
    FSDP_CHECK(t != nullptr, "token id {} is not in the vocabulary of {} (0..{})", id, name_, vocab_size_ - 1);
    tokens.push_back(*t);
  }
  return decode_tokens(decoder_.get(), std::move(tokens));
}

}  // namespace fsdp::data::hf
