// fsdp/core/text_file.h
#include "fsdp/core/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fsdp/core/error.h"

namespace fsdp {

void write_text_file(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  FSDP_CHECK(f != nullptr, "cannot write {}: {}", tmp, std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    FSDP_FAIL("cannot write {}: {}", tmp, std::strerror(written ? errno : write_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    FSDP_FAIL("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
}

}  // namespace fsdp
