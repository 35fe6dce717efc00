// Conversations to reply to (`fsdp_train generate --chat --messages FILE`): a JSONL file, one
// conversation per line in the messages format `prepare` takes,
//   {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}
// (other keys of the line are kept and ignored), ending with the turn to reply to. Blank
// lines are skipped. The file is read whole: it holds prompts, not a corpus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdp::data {

struct Conversation {
  int64_t line = 0;                // 1-based line in the file
  nlohmann::ordered_json record;   // the whole line
  nlohmann::ordered_json messages; // record["messages"]
};

// Throws fsdp::Error "<path>:<line>: why" for a line that is not a JSON object, has no
// "messages", or whose conversation check_conversation refuses; "<path> holds no
// conversation" for an empty file.
std::vector<Conversation> read_conversations(const std::string& path);

// Checks a conversation to reply to, throwing fsdp::Error without file and line (callers add
// them): a non-empty list of objects, each with a string "role" and a string "content"
// (unless it carries tool_calls), the last one not the assistant's: nothing to reply to.
void check_conversation(const nlohmann::ordered_json& messages);

}  // namespace fsdp::data
