#include "fsdp/core/error.h"

#include <cstring>

namespace fsdp {

void throw_error(const char* file, int line, const char* cond, const std::string& msg) {
  // Keep only the path below the repository root: messages stay short and stable.
  const char* short_file = file;
  for (const char* marker : {"/src/", "/include/", "/tests/"}) {
    if (const char* p = std::strstr(file, marker)) {
      short_file = p + 1;
      break;
    }
  }
  std::string text = msg;
  if (cond != nullptr) text += fmt::format(" (check `{}` failed", cond);
  else text += " (";
  text += fmt::format("{}{}:{})", cond != nullptr ? " at " : "at ", short_file, line);
  throw Error(text);
}

}  // namespace fsdp
