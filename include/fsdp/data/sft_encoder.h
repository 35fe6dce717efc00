// An SFT example (sft_example.h) to tokens and a per-token loss mask.
//
// Chat rendering: the model folder's chat template (chat::ChatTemplate, the one transformers'
// apply_chat_template uses), tokenized as apply_chat_template(tokenize=True) does (special
// tokens in the text parsed, none added). Plain rendering (`--template plain`, and the
// default for a folder without a chat template): [BOS] prompt completion [EOS], prompt and
// completion tokenized apart (torchtune's way), the completion and EOS trained; only prompt
// and alpaca examples have a plain form.
//
// Note [Assistant spans by prefix]
// Which tokens an assistant turn owns is found by rendering prefixes, as TRL's
// DataCollatorForCompletionOnlyLM successors and torchtune's tokenize_messages do, not by
// searching the text for a header string (which breaks on a template that names the role
// in the content, or tokenizes the header differently in context):
//   P_i = tokens(render(messages[:i], add_generation_prompt=true))   the prompt up to turn i
//   F_i = tokens(render(messages[:i+1], add_generation_prompt=false)) through turn i
//   F   = tokens(render(messages, add_generation_prompt=false))      the example
// and turn i's trained tokens are F_i[|P_i|:], which holds the template's end-of-turn
// (<|eot_id|>, </s>, <|im_end|>), so the model learns to stop. This needs P_i to be a prefix
// of F_i and F_i of F, token for token. A template that breaks it (Qwen3's drops earlier turns'
// reasoning; a BPE merge across the turn boundary) is refused naming the example's line,
// rather than training on a mask that is off by some tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/chat/chat_template.h"
#include "fsdp/data/sft_example.h"

namespace fsdp::data {

class Tokenizer;

enum class TrainOn { kAssistant, kLast, kAll };
const char* train_on_name(TrainOn t);  // "assistant", "last", "all"

struct SftOptions {
  TrainOn train_on = TrainOn::kAssistant;  // every assistant turn; the last one; every token
  bool sharegpt = false;                   // accept ShareGPT "conversations"
  // "" = the folder's chat template (its default one), "plain" = no template, else a named
  // template of the folder (tool_use, ...).
  std::string template_name;
  int64_t max_seq_len = 0;      // 0 = no limit; longer examples are truncated or dropped
  bool drop_overlong = false;   // drop rather than truncate (keeping the first max_seq_len tokens)
};

struct SftEncoded {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // 1 = trained, one per token
  bool truncated = false;
  bool dropped = false;       // over-long and drop_overlong: tokens and mask are empty
};

class SftEncoder {
 public:
  // `tok` null for pre-tokenized inputs (--vocab-size): only tokenized examples then.
  // Throws fsdp::Error when the template is asked for and the folder has none.
  SftEncoder(const Tokenizer* tok, int64_t vocab_size, const SftOptions& options);
  // Thread-safe (prepare's workers). Throws fsdp::Error without file and line.
  SftEncoded encode(const SftRecord& record) const;
  // Where the template came from ("<dir>/tokenizer_config.json: chat_template"), or "plain".
  std::string template_origin() const;

 private:
  std::vector<int32_t> render_ids(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  void chat(const SftRecord& r, SftEncoded& out) const;
  void plain(const SftRecord& r, SftEncoded& out) const;

  const Tokenizer* tok_;
  int64_t vocab_;
  SftOptions o_;
  std::optional<chat::ChatTemplate> template_;
};

}  // namespace fsdp::data
