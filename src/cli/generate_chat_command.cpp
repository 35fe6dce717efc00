// `fsdp_train generate --chat`: the assistant's reply to a conversation given on the command
// line (--system/--user/--assistant, printed as it grows) or to each conversation of a
// --messages JSONL file (each line printed back with its reply appended). The rendering and
// stop tokens are data/chat_prompt.h's, the loop train/chat_generate.h's.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/data/chat_prompt.h"
#include "fsdp/data/conversation_file.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/train/chat_generate.h"
#include "generate_args.h"

namespace fsdp::cli {

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// The folder whose generation_config.json / config.json says where generation ends: a Hugging
// Face --checkpoint folder; "" for an fsdp_train checkpoint (its tokenizer and template still
// give the end of turn).
std::string model_folder(const std::string& checkpoint) {
  std::error_code ec;
  return fs::is_directory(checkpoint, ec) && fs::exists(fs::path(checkpoint) / "config.json", ec) ? checkpoint : "";
}

}  // namespace

int run_generate_chat(const GenerateArgs& a) {
  // The conversations first: a bad --messages line stops the run before the model loads.
  std::vector<data::Conversation> conversations;
  if (!a.messages_file.empty()) {
    conversations = data::read_conversations(a.messages_file);
  } else {
    data::Conversation c;
    c.messages = json::array();
    for (const auto& [role, content] : a.turns) c.messages.push_back({{"role", role}, {"content", content}});
    data::check_conversation(c.messages);
    conversations.push_back(std::move(c));
  }

  // The template before the weights: a folder without one is refused before a large model loads.
  data::Tokenizer tok = load_generation_tokenizer(a);
  chat::ChatTemplate tmpl = data::chat_template_for(tok, a.chat_template);
  GenerationModel g = load_generation_model(a, std::move(tok));
  const model::LlamaConfig& c = g.m.config;
  const data::ChatPrompt prompt(g.tok, std::move(tmpl));
  const train::ChatStops stops = train::chat_stop_ids(prompt, g.tok, model_folder(a.checkpoint), c.vocab_size);
  spdlog::info("chat template: {}; replies stop at {}", prompt.chat_template().origin(),
               stops.described.empty() ? std::string("nothing but --max-new-tokens") : stops.described);

  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0;
  for (const data::Conversation& conv : conversations) {
    const std::string where = a.messages_file.empty() ? std::string("the conversation")
                                                      : a.messages_file + ":" + std::to_string(conv.line);
    std::vector<int32_t> ids;
    try {
      ids = prompt.ids(conv.messages);
    } catch (const Error& e) {
      FSDP_FAIL("{}: {}", where, e.what());
    }
    FSDP_CHECK(!ids.empty(), "{}: the chat template rendered an empty prompt", where);
    FSDP_CHECK(int64_t(ids.size()) <= c.max_seq_len,
               "{}: the rendered prompt is {} tokens, more than the model's context of {} (max_seq_len)", where,
               ids.size(), c.max_seq_len);
    longest = std::max<int64_t>(longest, int64_t(ids.size()));
    prompts.push_back(std::move(ids));
  }
  spdlog::info("{} conversation(s), prompts of up to {} tokens; sampling: {}; at most {} new tokens",
               conversations.size(), longest, a.sampling.summary(), a.max_new_tokens);

  // One cache for every conversation (generate resets it), sized for the longest.
  const int64_t max_len = std::clamp<int64_t>(longest + a.max_new_tokens - 1, longest, c.max_seq_len);
  model::LlamaDecoder decoder(c, 1, max_len, std::min<int64_t>(longest, 256), g.dtype, g.device);
  if (!g.m.router_bias.empty()) decoder.router_bias()->set(g.m.router_bias);
  model::Sampler sampler(a.sampling);
  int64_t stopped = 0, tokens = 0;
  double seconds = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    const bool stream = a.messages_file.empty();
    std::function<void(const std::string&)> on_text;
    if (stream) on_text = print;
    const train::ChatReply r = train::generate_reply(decoder, *g.m.params, prompt, prompts[i], sampler,
                                                     a.max_new_tokens, stops, on_text);
    stopped += r.result.hit_eos ? 1 : 0;
    tokens += int64_t(r.result.tokens.size());
    seconds += r.result.prefill_seconds + r.result.decode_seconds;
    if (stream) {
      print("\n");
    } else {
      json out = conversations[i].record;
      out["messages"].push_back({{"role", "assistant"}, {"content", r.text}});
      print(out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    }
  }
  spdlog::info("generated {} tokens for {} conversation(s) in {:.1f} ms ({:.1f} tokens/s); {} stopped at an end of "
               "turn, {} at --max-new-tokens or the context length",
               tokens, conversations.size(), 1e3 * seconds, double(tokens) / std::max(seconds, 1e-9), stopped,
               int64_t(conversations.size()) - stopped);
  return 0;
}

}  // namespace fsdp::cli
