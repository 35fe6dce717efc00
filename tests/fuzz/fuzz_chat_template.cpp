// Fuzz target: a chat template (chat::ChatTemplate::from_string, the parser, and the renderer
// over a fixed conversation with tools, special tokens and a frozen clock): what a model
// folder's tokenizer_config.json or chat_template.jinja hands prepare and generate. A template
// may be refused only with fsdp::Error (TemplateError: line, column, message). Properties of an
// accepted template: rendering is deterministic (twice, the same bytes and generation spans),
// its text is valid UTF-8, and every generation span lies inside it in order.
#include <nlohmann/json.hpp>

#include "fsdp/chat/chat_template.h"
#include "fsdp/chat/python_string.h"
#include "fuzz_util.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "  Hi é👋\n\tthere  "},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back",
     "tool_calls": [{"id": "abc123xyz", "type": "function",
                     "function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "42", "tool_call_id": "abc123xyz"},
    {"role": "user", "content": ""}])");
  return messages;
}

const nlohmann::ordered_json& variables() {
  static const auto extra = nlohmann::ordered_json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
          "date_string": "26 Jul 2024", "enable_thinking": false})");
  return extra;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  fsdp::chat::RenderOptions options;
  options.now = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1725372309)); };
  options.max_steps = 20000;         // 10 s per input is libFuzzer's limit here; real templates loop over messages
  options.max_output = size_t(1) << 20;
  try {
    const auto t = fsdp::chat::ChatTemplate::from_string(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    const auto a = t.render(conversation(), true, variables(), options);
    const auto b = t.render(conversation(), true, variables(), options);
    FUZZ_EXPECT(a.text == b.text && a.generation_spans == b.generation_spans);
    FUZZ_EXPECT(fsdp::chat::py::valid_utf8(a.text));
    size_t last = 0;
    for (const auto& [begin, end] : a.generation_spans) {
      FUZZ_EXPECT(begin <= end && end <= a.text.size());
      FUZZ_EXPECT(begin >= last || end <= last);  // nested or in order, never crossing
      last = end;
    }
  } catch (const fsdp::Error&) {
    return 0;
  }
  return 0;
}
