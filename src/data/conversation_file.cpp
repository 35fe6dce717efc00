// Conversations for generate --chat; see conversation_file.h.
#include "fsdp/data/conversation_file.h"

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::data {

using json = nlohmann::ordered_json;

void check_conversation(const json& messages) {
  FSDP_CHECK(messages.is_array() && !messages.empty(),
             "\"messages\" must be a non-empty list of {{\"role\", \"content\"}} objects");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    FSDP_CHECK(m.is_object(), "messages[{}] is not an object", i);
    FSDP_CHECK(m.contains("role") && m["role"].is_string(), "messages[{}] has no string \"role\"", i);
    const bool tool_call = m.contains("tool_calls") && !m["tool_calls"].is_null();
    FSDP_CHECK((m.contains("content") && m["content"].is_string()) || tool_call,
               "messages[{}] ({}) has no string \"content\"", i, m["role"].get<std::string>());
  }
  FSDP_CHECK(messages.back()["role"] != "assistant",
             "the last message is the assistant's, so there is nothing to reply to: end the conversation with the "
             "turn to answer (the user's)");
}

std::vector<Conversation> read_conversations(const std::string& path) {
  const std::string text = read_regular_file(path);
  std::vector<Conversation> out;
  int64_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view s(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    if (s.find_first_not_of(" \t") == std::string_view::npos) continue;
    Conversation c;
    c.line = line;
    try {
      c.record = json::parse(s);
    } catch (const json::exception&) {
      FSDP_FAIL("{}:{}: not a JSON object (one conversation per line: {{\"messages\": [{{\"role\": \"user\", "
                "\"content\": \"...\"}}]}})", path, line);
    }
    FSDP_CHECK(c.record.is_object() && c.record.contains("messages"),
               "{}:{}: no \"messages\" (one conversation per line: {{\"messages\": [{{\"role\": \"user\", "
               "\"content\": \"...\"}}]}})", path, line);
    c.messages = c.record["messages"];
    try {
      check_conversation(c.messages);
    } catch (const Error& e) {
      FSDP_FAIL("{}:{}: {}", path, line, e.what());
    }
    out.push_back(std::move(c));
  }
  FSDP_CHECK(!out.empty(), "{} holds no conversation (one per line: {{\"messages\": [{{\"role\": \"user\", "
             "\"content\": \"...\"}}]}})", path);
  return out;
}

}  // namespace fsdp::data
