// SFT JSONL lines: which format a line is, and its fields checked (sft_example.h).
#include "fsdp/data/sft_example.h"

#include "fsdp/core/error.h"

namespace fsdp::data {

namespace {

constexpr int64_t kIgnoredLabel = -100;  // Hugging Face's and PyTorch's ignore_index

const std::string& string_field(const nlohmann::ordered_json& o, const char* key, const std::string& where) {
  FSDP_CHECK(o.contains(key), "{}has no \"{}\"", where, key);
  FSDP_CHECK(o[key].is_string(), "{}\"{}\" must be a string, got {}", where, key, o[key].type_name());
  return o[key].get_ref<const std::string&>();
}

// The roles a conversation may use: what the published templates know.
bool known_role(const std::string& r) { return r == "system" || r == "user" || r == "assistant" || r == "tool"; }

// ShareGPT's speakers (FastChat's and axolotl's names) as chat roles.
std::optional<std::string> sharegpt_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "model") return "assistant";
  if (from == "system") return "system";
  if (from == "tool" || from == "function_response" || from == "observation") return "tool";
  return std::nullopt;
}

nlohmann::ordered_json messages_of(const nlohmann::ordered_json& list, bool sharegpt) {
  const char* key = sharegpt ? "conversations" : "messages";
  FSDP_CHECK(list.is_array(), "\"{}\" must be a list, got {}", key, list.type_name());
  FSDP_CHECK(!list.empty(), "\"{}\" is empty", key);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  bool assistant = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::ordered_json& m = list[i];
    const std::string where = fmt::format("{}[{}] ", key, i);
    FSDP_CHECK(m.is_object(), "{}must be an object, got {}", where, m.type_name());
    nlohmann::ordered_json msg;
    if (sharegpt) {
      const std::string& from = string_field(m, "from", where);
      const std::optional<std::string> role = sharegpt_role(from);
      FSDP_CHECK(role, "{}has an unknown \"from\": \"{}\" (known: human, user, gpt, assistant, model, system, tool, "
                 "function_response, observation)", where, from);
      msg["role"] = *role;
      msg["content"] = string_field(m, "value", where);
    } else {
      const std::string& role = string_field(m, "role", where);
      FSDP_CHECK(known_role(role), "{}has an unknown role \"{}\" (known: system, user, assistant, tool)", where, role);
      // Every key passes to the template as transformers passes it (tool_calls, thinking, ...);
      // content must be text unless the message carries tool calls instead.
      msg = m;
      if (!(m.contains("tool_calls") && (!m.contains("content") || m["content"].is_null())))
        string_field(m, "content", where);
    }
    assistant = assistant || msg["role"] == "assistant";
    out.push_back(std::move(msg));
  }
  FSDP_CHECK(assistant, "\"{}\" has no assistant turn: nothing to train on", key);
  return out;
}

nlohmann::ordered_json user_assistant(const std::string& prompt, const std::string& completion) {
  return nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt}}, {{"role", "assistant"}, {"content", completion}}});
}

}  // namespace

const char* sft_format_name(SftFormat f) {
  switch (f) {
    case SftFormat::kMessages: return "messages";
    case SftFormat::kShareGpt: return "sharegpt";
    case SftFormat::kPromptCompletion: return "prompt";
    case SftFormat::kAlpaca: return "alpaca";
    case SftFormat::kTokenized: return "tokenized";
  }
  return "?";
}

std::optional<SftFormat> sft_format_of(const nlohmann::ordered_json& o) {
  if (!o.is_object()) return std::nullopt;
  if (o.contains("messages")) return SftFormat::kMessages;
  if (o.contains("conversations")) return SftFormat::kShareGpt;
  if (o.contains("prompt") || o.contains("completion")) return SftFormat::kPromptCompletion;
  if (o.contains("instruction") || o.contains("output")) return SftFormat::kAlpaca;
  if (o.contains("labels")) return SftFormat::kTokenized;
  return std::nullopt;
}

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  // Verbatim from tatsu-lab/stanford_alpaca train.py's PROMPT_DICT.
  if (input.empty()) {
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" + instruction + "\n\n### Response:\n";
  }
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
         "response that appropriately completes the request.\n\n### Instruction:\n" + instruction + "\n\n### Input:\n" +
         input + "\n\n### Response:\n";
}

SftRecord parse_sft_line(const nlohmann::ordered_json& o, SftFormat format, bool sharegpt, int64_t vocab_size) {
  SftRecord r;
  r.format = format;
  switch (format) {
    case SftFormat::kMessages:
      r.messages = messages_of(o["messages"], false);
      break;
    case SftFormat::kShareGpt:
      FSDP_CHECK(sharegpt, "a ShareGPT \"conversations\" line: pass --sharegpt to map its from/value to role/content");
      r.messages = messages_of(o["conversations"], true);
      break;
    case SftFormat::kPromptCompletion:
      r.prompt = string_field(o, "prompt", "");
      r.completion = string_field(o, "completion", "");
      r.messages = user_assistant(r.prompt, r.completion);
      break;
    case SftFormat::kAlpaca: {
      const std::string& instruction = string_field(o, "instruction", "");
      const std::string input = o.contains("input") && !o["input"].is_null() ? string_field(o, "input", "") : "";
      r.completion = string_field(o, "output", "");
      r.prompt = alpaca_prompt(instruction, input);
      // In a chat template the user turn holds the instruction, then the input after a blank line.
      r.messages = user_assistant(input.empty() ? instruction : instruction + "\n\n" + input, r.completion);
      break;
    }
    case SftFormat::kTokenized: {
      FSDP_CHECK(o.contains("input_ids"), "has \"labels\" but no \"input_ids\"");
      const nlohmann::ordered_json& ids = o["input_ids"];
      const nlohmann::ordered_json& labels = o["labels"];
      FSDP_CHECK(ids.is_array() && labels.is_array(), "\"input_ids\" and \"labels\" must be lists");
      FSDP_CHECK(ids.size() == labels.size(), "\"labels\" has {} entries, \"input_ids\" {}: they must be as long",
                 labels.size(), ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        FSDP_CHECK(ids[i].is_number_integer() && ids[i].get<int64_t>() >= 0 && ids[i].get<int64_t>() < vocab_size,
                   "input_ids[{}] = {} is not a token id in [0, {})", i, ids[i].dump(), vocab_size);
        FSDP_CHECK(labels[i].is_number_integer(), "labels[{}] = {} is not an integer", i, labels[i].dump());
        const int64_t id = ids[i].get<int64_t>(), label = labels[i].get<int64_t>();
        FSDP_CHECK(label == kIgnoredLabel || label == id,
                   "labels[{}] = {} is neither -100 nor input_ids[{}] = {} (labels are the unshifted input_ids, as "
                   "Hugging Face models take them)", i, label, i, id);
        r.input_ids.push_back(int32_t(id));
        r.trained.push_back(label == kIgnoredLabel ? 0 : 1);
      }
      FSDP_CHECK(!r.input_ids.empty(), "\"input_ids\" is empty");
      break;
    }
  }
  return r;
}

}  // namespace fsdp::data
