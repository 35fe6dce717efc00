// Conversations as generation prompts; see chat_prompt.h.
#include "fsdp/data/chat_prompt.h"

#include <filesystem>

#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;

namespace fsdp::data {

namespace {

using json = nlohmann::ordered_json;

// Text no template writes and no tokenizer merges with its neighbours' special tokens.
constexpr const char* kProbeAnswer = "fsdp chat probe answer";

bool is_special(const Tokenizer& tok, int32_t id) {
  const int32_t one[] = {id};
  return tok.decode(one, /*skip_special=*/true).empty() && !tok.decode(one, /*skip_special=*/false).empty();
}

// The first special token after an assistant turn's content, which is how the template ends
// the turn. A template may insist on a system message first (or refuse one): both are tried.
std::vector<int32_t> find_end_of_turn(const Tokenizer& tok, const chat::ChatTemplate& t) {
  const json user = {{"role", "user"}, {"content", "fsdp chat probe question"}};
  const json answer = {{"role", "assistant"}, {"content", kProbeAnswer}};
  const json system = {{"role", "system"}, {"content", "fsdp chat probe system"}};
  for (const json& messages : {json::array({user, answer}), json::array({system, user, answer})}) {
    std::string text;
    try {
      text = t.render(messages, /*add_generation_prompt=*/false).text;
    } catch (const std::exception&) {
      continue;  // raise_exception on this shape of conversation: try the next
    }
    const size_t at = text.rfind(kProbeAnswer);
    if (at == std::string::npos) continue;
    std::vector<int32_t> ids;
    tok.encode(std::string_view(text).substr(at + std::string_view(kProbeAnswer).size()),
               {.add_special = false, .parse_special = true}, ids);
    for (const int32_t id : ids)
      if (is_special(tok, id)) return {id};
    return {};
  }
  return {};
}

}  // namespace

chat::ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& template_file) {
  const fs::path dir = fs::path(tok.path()).parent_path();
  if (!template_file.empty()) return chat::ChatTemplate::from_file(template_file, dir.string());
  FSDP_CHECK(chat::ChatTemplate::model_dir_has_template(dir.string()),
             "--chat needs a chat template, and the tokenizer's folder {} has none (no chat_template.jinja, and {} "
             "has no \"chat_template\"): a base model has no chat format; generate from it with --prompt TEXT "
             "without --chat, or give a template with --chat-template FILE.jinja",
             dir.string(), (dir / "tokenizer_config.json").string());
  return chat::ChatTemplate::from_model_dir(dir.string());
}

ChatPrompt::ChatPrompt(const Tokenizer& tok, chat::ChatTemplate tmpl)
    : tok_(tok), template_(std::move(tmpl)), end_of_turn_(find_end_of_turn(tok, template_)) {}

std::vector<int32_t> ChatPrompt::ids(const json& messages) const {
  const std::string text = template_.render(messages, /*add_generation_prompt=*/true).text;
  std::vector<int32_t> out;
  tok_.encode(text, {.add_special = false, .parse_special = true}, out);
  return out;
}

std::string ChatPrompt::decode_reply(std::span<const int32_t> ids) const {
  return tok_.decode(ids, /*skip_special=*/true);
}

}  // namespace fsdp::data
