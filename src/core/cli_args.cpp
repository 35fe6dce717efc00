#include "fsdp/core/cli_args.h"

namespace fsdp {

bool ArgCursor::next() {
  if (i_ + 1 >= argc_) return false;
  raw_ = arg_ = argv_[++i_];
  has_inline_ = false;
  inline_.clear();
  if (arg_.starts_with("--")) {
    if (const auto eq = arg_.find('='); eq != std::string::npos) {
      inline_ = arg_.substr(eq + 1);
      arg_.resize(eq);
      has_inline_ = true;
    }
  }
  return true;
}

std::string ArgCursor::value() {
  if (has_inline_) return inline_;
  if (i_ + 1 >= argc_) throw UsageError{arg_ + " needs a value"};
  return argv_[++i_];
}

}  // namespace fsdp
