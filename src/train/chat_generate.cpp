// Chat replies; see chat_generate.h.
#include "fsdp/train/chat_generate.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "fsdp/ckpt/generation_config.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"

namespace fsdp::train {

ChatStops chat_stop_ids(const data::ChatPrompt& prompt, const data::Tokenizer& tok, const std::string& model_dir,
                        int64_t vocab_size) {
  std::vector<std::pair<int32_t, std::string>> found;  // id, where it came from
  auto add = [&](int32_t id, const std::string& source) {
    FSDP_CHECK(id >= 0 && id < vocab_size, "{} names token {} as an end of generation, outside the model's vocabulary "
               "of {}", source, id, vocab_size);
    for (auto& [have, sources] : found) {
      if (have == id) {
        sources += ", " + source;
        return;
      }
    }
    found.emplace_back(id, source);
  };
  if (!model_dir.empty()) {
    // Which file it was: generation_config.json wins over config.json (as transformers).
    const std::string file = std::filesystem::exists(std::filesystem::path(model_dir) / "generation_config.json")
                                 ? "generation_config.json"
                                 : "config.json";
    for (const int32_t id : ckpt::hf_eos_token_ids(model_dir)) add(id, file);
  }
  for (const int32_t id : prompt.end_of_turn_ids()) add(id, "the template's end of turn");
  if (tok.eos_id() >= 0) add(tok.eos_id(), "the tokenizer's EOS");
  ChatStops s;
  for (const auto& [id, sources] : found) {
    const int32_t one[] = {id};
    s.ids.push_back(id);
    s.described += fmt::format("{}{} ({}: {})", s.described.empty() ? "" : ", ", tok.decode(one, false), id, sources);
  }
  return s;
}

ChatReply generate_reply(model::LlamaDecoder& decoder, model::ParamProvider& params, const data::ChatPrompt& prompt,
                         const std::vector<int32_t>& prompt_ids, model::Sampler& sampler, int64_t max_new_tokens,
                         const ChatStops& stops, const std::function<void(const std::string&)>& on_text) {
  ChatReply reply;
  std::vector<int32_t> ids;  // the reply's ids without the stop token
  auto on_token = [&](int32_t id) {
    if (std::find(stops.ids.begin(), stops.ids.end(), id) != stops.ids.end()) return;
    ids.push_back(id);
    if (!on_text) return;
    // The reply decoded whole each time: a piece may decode differently at the start of a text
    // (sentencepiece's leading space) or complete a character the previous one began.
    const std::string text = prompt.decode_reply(ids);
    if (text.size() <= reply.text.size() || text.compare(0, reply.text.size(), reply.text) != 0) return;
    on_text(text.substr(reply.text.size()));
    reply.text = text;
  };
  reply.result = model::generate(decoder, params, prompt_ids, sampler, max_new_tokens, std::span(stops.ids), on_token);
  const std::string text = prompt.decode_reply(ids);
  if (on_text && text.size() > reply.text.size() && text.compare(0, reply.text.size(), reply.text) == 0)
    on_text(text.substr(reply.text.size()));
  reply.text = text;
  return reply;
}

}  // namespace fsdp::train
