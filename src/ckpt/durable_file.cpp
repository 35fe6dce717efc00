#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fsdp/core/error.h"

namespace fsdp::ckpt::detail {

namespace fs = std::filesystem;

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    FSDP_CHECK(w > 0, "cannot write {}: {}", path, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FSDP_CHECK(fd >= 0, "cannot open directory {} to fsync it: {}", d.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FSDP_CHECK(rc == 0, "cannot fsync directory {}: {}", d.string(), std::strerror(err));
}

void write_file_synced(const fs::path& path, const std::string& bytes) {
  const std::string p = path.string();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FSDP_CHECK(fd >= 0, "cannot create {}: {}", p, std::strerror(errno));
  try {
    write_all(fd, bytes.data(), bytes.size(), p);
    FSDP_CHECK(::fsync(fd) == 0, "cannot fsync {}: {}", p, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  FSDP_CHECK(::close(fd) == 0, "cannot close {}: {}", p, std::strerror(errno));
}

void replace_file_durably(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());  // a crashed earlier attempt
  try {
    write_file_synced(tmp, bytes);
    FSDP_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp.string(), path.string(),
               std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(path.parent_path());
}

}  // namespace fsdp::ckpt::detail
