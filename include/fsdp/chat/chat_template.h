// A model folder's chat template, found and rendered as transformers (5.24) does it:
//
//   AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tokenize=False,
//                                                          add_generation_prompt=..., **extra)
//
// Where the template comes from, first match wins (transformers' tokenization_utils_base.py):
//   1. dir/chat_template.jinja (the "default" template; what transformers >= 4.50 saves), and
//      dir/chat_templates/<name>.jinja (named templates);
//   2. tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}.
// With several templates, `name` picks one; without a name, "tool_use" when the render passes
// `tools` and the folder has one, else "default".
//
// What the template sees: `messages` (each message with its keys whose value is null dropped,
// and reasoning under "reasoning_content", "thinking" or "reasoning" copied to the first two,
// as transformers does), `add_generation_prompt`, `tools` and `documents` (none unless given in
// `extra`), the special tokens as strings (bos_token, eos_token, unk_token, sep_token,
// pad_token, cls_token, mask_token when set; "extra_special_tokens" given as a mapping; any
// other "<name>_token" string key of the config), and every key of `extra` (which overrides a
// special token, as transformers' kwargs do).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fsdp/chat/template_eval.h"

namespace fsdp::chat {

class ChatTemplate {
 public:
  // Throws fsdp::Error naming the file and key: no template, tokenizer_config.json that is not
  // JSON or has a chat_template of the wrong type, a special token that is not a string, an
  // unknown `name`; and TemplateError when the template does not parse or uses what this
  // interpreter does not support (every construct is checked here, before any render).
  static ChatTemplate from_model_dir(const std::string& dir, const std::string& name = "");
  // A template in a file of its own (vLLM's and transformers' `chat_template=` override for a
  // folder without one, or with another), rendered with the special tokens of `tokens_dir`'s
  // tokenizer_config.json (as from_model_dir reads them; none when it has no such file).
  static ChatTemplate from_file(const std::string& file, const std::string& tokens_dir);
  // Whether from_model_dir(dir) would find a template (a chat_template.jinja, chat_templates/,
  // or a tokenizer_config.json "chat_template" that is not null), without parsing it: a base
  // model's folder has none, which callers tell apart from a broken one.
  static bool model_dir_has_template(const std::string& dir);
  // A template given as text, with the special tokens it may use ({"bos_token", "<s>"}, ...).
  static ChatTemplate from_string(const std::string& source,
                                  std::vector<std::pair<std::string, std::string>> special_tokens = {},
                                  const std::string& origin = "chat_template");

  // `messages`: a JSON array of objects, each with a string "role". `extra`: a JSON object
  // of further template variables (tools, documents, date_string, enable_thinking, ...), or null.
  // Throws fsdp::Error for bad messages ("messages[2]: ..."), TemplateError for an error while
  // rendering (raise_exception's message included).
  RenderResult render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                      const nlohmann::ordered_json& extra, const RenderOptions& options = {}) const;
  RenderResult render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }  // "<dir>/tokenizer_config.json: chat_template", ...
  const std::vector<std::pair<std::string, std::string>>& special_tokens() const { return special_tokens_; }

 private:
  std::string source_;
  std::string origin_;
  std::shared_ptr<const ParsedTemplate> parsed_;
  std::shared_ptr<const ParsedTemplate> tool_use_;  // the "tool_use" template when no name was asked for
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace fsdp::chat
