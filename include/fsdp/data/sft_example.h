// Supervised fine-tuning examples as JSONL lines, recognised by their fields (the formats
// TRL, axolotl and torchtune users bring):
//   messages       {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...}, ...]}
//   sharegpt       {"conversations": [{"from": "human"|"gpt"|"system"|..., "value": ...}, ...]}
//                  (only with --sharegpt: from/value mapped to role/content as below)
//   prompt         {"prompt": "...", "completion": "..."}
//   alpaca         {"instruction": "...", "input": "..." (optional), "output": "..."}
//   tokenized      {"input_ids": [...], "labels": [...]}: labels[i] == -100 where token i is
//                  not trained, else equal to input_ids[i] (Hugging Face's unshifted labels)
// A line with none of these fields is not an SFT example (a pretraining text / input_ids
// line). parse_sft_line turns an example into what sft_encoder.h renders: a conversation
// (every format but tokenized), and for prompt and alpaca the prompt/completion pair a
// plain (template-free) rendering uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdp::data {

enum class SftFormat { kMessages, kShareGpt, kPromptCompletion, kAlpaca, kTokenized };
inline constexpr int kSftFormats = 5;
const char* sft_format_name(SftFormat f);  // "messages", "sharegpt", "prompt", "alpaca", "tokenized"

// The format a JSON object's fields say, or nullopt for a line that is not an SFT example.
// `conversations` is ShareGPT whether or not --sharegpt was given (parse_sft_line refuses
// it without the flag, saying so).
std::optional<SftFormat> sft_format_of(const nlohmann::ordered_json& object);

struct SftRecord {
  SftFormat format = SftFormat::kMessages;
  nlohmann::ordered_json messages;   // the conversation (all but kTokenized)
  std::string prompt, completion;    // kPromptCompletion and kAlpaca: the plain rendering's parts
  std::vector<int32_t> input_ids;    // kTokenized
  std::vector<uint8_t> trained;      // kTokenized: 1 where labels[i] != -100
};

// Parses one SFT line (its format already known to be SFT). Throws fsdp::Error saying what
// is wrong, without file and line (the caller adds them): a missing or mistyped field, an
// unknown role or ShareGPT `from`, ShareGPT without `sharegpt`, ids outside [0, vocab_size),
// labels of another length or naming another token.
SftRecord parse_sft_line(const nlohmann::ordered_json& object, SftFormat format, bool sharegpt, int64_t vocab_size);

// Stanford Alpaca's prompt (with and without an input), ending in "### Response:\n": the
// plain rendering of an alpaca example for a base model without a chat template.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

}  // namespace fsdp::data
