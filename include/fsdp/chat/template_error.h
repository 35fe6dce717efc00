// The one error a chat template gives: where in the template (line and column, 1-based,
// columns in characters) and what, e.g.
//   chat_template:3:17: filter 'wordwrap' is not supported
//   Llama-2-7b-chat-hf/tokenizer_config.json: chat_template:1:314: the template raised an error: Conversation
//     roles must alternate user/assistant/user/assistant/...
// `origin` names the template: "chat_template" by default, the file and key when the template
// came from a model folder ("model/tokenizer_config.json: chat_template").
#pragma once

#include <string>

#include "fsdp/core/error.h"

namespace fsdp::chat {

struct SourcePos {
  int line = 1;
  int col = 1;
};

class TemplateError : public fsdp::Error {
 public:
  TemplateError(const std::string& origin, SourcePos pos, std::string message, bool raised = false);
  SourcePos pos() const { return pos_; }
  // The bare message: for raise_exception, exactly the template's text (what transformers says).
  const std::string& message() const { return message_; }
  bool raised_by_template() const { return raised_; }

 private:
  SourcePos pos_;
  std::string message_;
  bool raised_;
};

}  // namespace fsdp::chat
