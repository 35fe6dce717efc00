// SFT examples to tokens and loss masks; see sft_encoder.h and Note [Assistant spans by prefix].
#include "fsdp/data/sft_encoder.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;

namespace fsdp::data {

namespace {

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

const char* train_on_name(TrainOn t) {
  switch (t) {
    case TrainOn::kAssistant: return "assistant";
    case TrainOn::kLast: return "last";
    case TrainOn::kAll: return "all";
  }
  return "?";
}

SftEncoder::SftEncoder(const Tokenizer* tok, int64_t vocab_size, const SftOptions& options)
    : tok_(tok), vocab_(vocab_size), o_(options) {
  if (tok_ == nullptr || o_.template_name == "plain") return;
  const fs::path dir = fs::path(tok_->path()).parent_path();
  if (o_.template_name.empty() && !chat::ChatTemplate::model_dir_has_template(dir.string())) return;  // a base model: plain
  template_ = chat::ChatTemplate::from_model_dir(dir.string(), o_.template_name);
}

std::string SftEncoder::template_origin() const { return template_ ? template_->origin() : "plain"; }

std::vector<int32_t> SftEncoder::render_ids(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  const std::string text = template_->render(messages, add_generation_prompt).text;
  std::vector<int32_t> ids;
  tok_->encode(text, {.add_special = false, .parse_special = true}, ids);
  return ids;
}

void SftEncoder::chat(const SftRecord& r, SftEncoded& out) const {
  const nlohmann::ordered_json& m = r.messages;
  out.tokens = render_ids(m, false);
  out.mask.assign(out.tokens.size(), o_.train_on == TrainOn::kAll ? 1 : 0);
  if (o_.train_on == TrainOn::kAll) return;
  size_t last = 0;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]["role"] == "assistant") last = i;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i]["role"] != "assistant" || (o_.train_on == TrainOn::kLast && i != last)) continue;
    const nlohmann::ordered_json before(m.begin(), m.begin() + std::ptrdiff_t(i));
    const nlohmann::ordered_json through(m.begin(), m.begin() + std::ptrdiff_t(i + 1));
    const std::vector<int32_t> p = render_ids(before, true), f = render_ids(through, false);
    FSDP_CHECK(is_prefix(p, f) && is_prefix(f, out.tokens),
               "the chat template ({}) does not render this conversation's turns as prefixes of each other (turn {}, "
               "the assistant's: {} of messages[:{}] with the generation prompt, then messages[:{}], then all {}), "
               "so which tokens are the assistant's cannot be told; see docs/supervised-fine-tuning.md",
               template_->origin(), i,
               !is_prefix(p, f) ? "the prompt's tokens are not a prefix of the turn's" : "the turn's tokens are not a "
                                                                                          "prefix of the whole's",
               i, i + 1, m.size());
    std::fill(out.mask.begin() + std::ptrdiff_t(p.size()), out.mask.begin() + std::ptrdiff_t(f.size()), 1);
  }
}

void SftEncoder::plain(const SftRecord& r, SftEncoded& out) const {
  FSDP_CHECK(r.format == SftFormat::kPromptCompletion || r.format == SftFormat::kAlpaca,
             "a {} example needs a chat template, and {} (give a model folder whose tokenizer_config.json or "
             "chat_template.jinja has one)",
             sft_format_name(r.format),
             o_.template_name == "plain" ? "--template plain renders none" : "the tokenizer's folder has none");
  if (tok_->bos_id() >= 0) out.tokens.push_back(tok_->bos_id());
  tok_->encode(r.prompt, out.tokens);
  out.mask.assign(out.tokens.size(), o_.train_on == TrainOn::kAll ? 1 : 0);
  const size_t prompt = out.tokens.size();
  tok_->encode(r.completion, out.tokens);
  if (tok_->eos_id() >= 0) out.tokens.push_back(tok_->eos_id());
  out.mask.resize(out.tokens.size(), 1);
  FSDP_CHECK(out.tokens.size() > prompt, "the completion is empty and the tokenizer has no EOS: nothing to train on");
}

SftEncoded SftEncoder::encode(const SftRecord& r) const {
  SftEncoded out;
  if (r.format == SftFormat::kTokenized) {
    out.tokens = r.input_ids;
    out.mask = o_.train_on == TrainOn::kAll ? std::vector<uint8_t>(r.trained.size(), 1) : r.trained;
  } else {
    FSDP_CHECK(tok_ != nullptr, "a {} example is text, which needs a tokenizer (--tokenizer); with --vocab-size "
               "only tokenized examples (input_ids + labels) are taken", sft_format_name(r.format));
    if (template_) {
      chat(r, out);
    } else {
      plain(r, out);
    }
  }
  for (const int32_t id : out.tokens)
    FSDP_CHECK(id >= 0 && id < vocab_, "token id {} is outside the vocabulary of {}", id, vocab_);
  if (o_.max_seq_len > 0 && int64_t(out.tokens.size()) > o_.max_seq_len) {
    if (o_.drop_overlong) {
      out = SftEncoded{};
      out.dropped = true;
      return out;
    }
    out.tokens.resize(size_t(o_.max_seq_len));
    out.mask.resize(size_t(o_.max_seq_len));
    out.truncated = true;
  }
  return out;
}

}  // namespace fsdp::data
