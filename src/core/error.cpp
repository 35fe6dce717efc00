#include "fsdp/core/error.h"

#include <unistd.h>

#include <cstring>

namespace fsdp {

namespace {

// The path below the repository root: short and stable.
const char* short_path(const char* file) {
  for (const char* marker : {"/src/", "/include/", "/tests/"}) {
    if (const char* p = std::strstr(file, marker)) return p + 1;
  }
  return file;
}

}  // namespace

void throw_error(const char* file, int line, const char* cond, const std::string& msg) {
  const std::string where = cond != nullptr ? fmt::format("check `{}` failed at {}:{}", cond, short_path(file), line)
                                            : fmt::format("at {}:{}", short_path(file), line);
  throw Error(msg, where);
}

void fail_call(const CallFailure& f) {
  throw Error(fmt::format("{} failed on {}: {}{}", f.call, f.who, f.error, f.detail),
              fmt::format("at {}:{}", short_path(f.file), f.line));
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

}  // namespace fsdp
