// A conversation as the prompt of a reply (`fsdp_train generate --chat`): rendered with the
// chat template and add_generation_prompt=true, tokenized as transformers'
// apply_chat_template(messages, add_generation_prompt=True, tokenize=True) does: the special
// tokens the template writes (<|begin_of_text|>, <s>, <|start_header_id|>) parsed, none added,
// so a template that emits BOS gets exactly one.
//
// Where a reply ends: the special tokens the template closes an assistant turn with, found by
// rendering a user turn and an assistant turn and tokenizing what follows the assistant's
// content (<|eot_id|> for Llama 3, </s> for Llama 2 and Mistral, <|im_end|> for ChatML,
// <end_of_turn> for Gemma). That is what the SFT mask trains the model to emit
// (sft_encoder.h), so generation stops where training taught it to; the caller adds the model
// folder's eos_token_id list and the tokenizer's EOS.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/chat/chat_template.h"

namespace fsdp::data {

class Tokenizer;

// The template generate --chat renders with: `template_file` (--chat-template) when given,
// with the special tokens of the tokenizer's folder; else the tokenizer folder's own (a
// Hugging Face model folder: chat_template.jinja or tokenizer_config.json). A folder without
// one (a base model) is refused naming the file looked in and what to do instead.
chat::ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& template_file);

class ChatPrompt {
 public:
  ChatPrompt(const Tokenizer& tok, chat::ChatTemplate tmpl);

  // The prompt's ids. `messages` is a conversation as `prepare` takes one (role/content
  // objects); the template's own errors (raise_exception) name the template.
  std::vector<int32_t> ids(const nlohmann::ordered_json& messages) const;
  // The special tokens that end an assistant turn under this template (usually one; none when
  // the template closes turns with plain text, or refuses the probe conversation).
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_; }
  // A reply's ids as text: special tokens dropped (transformers' decode(...,
  // skip_special_tokens=True) of the generated ids alone).
  std::string decode_reply(std::span<const int32_t> ids) const;

  const chat::ChatTemplate& chat_template() const { return template_; }

 private:
  const Tokenizer& tok_;
  chat::ChatTemplate template_;
  std::vector<int32_t> end_of_turn_;
};

}  // namespace fsdp::data
