// Opening user-named files without blocking on FIFOs; see regular_file.h.
#include "fsdp/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fsdp/core/error.h"

namespace fsdp {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

// -1 with errno set, or -2 with `mode` the file's type when it is not a regular file.
int open_checked(const std::string& path, mode_t& mode) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    mode = st.st_mode;
    return -2;
  }
  // Regular files never block; clear the flag so reads behave as usual everywhere.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int open_regular_file(const std::string& path, std::string& why) {
  mode_t mode = 0;
  const int fd = open_checked(path, mode);
  if (fd == -1) why = std::strerror(errno);
  if (fd == -2) why = fmt::format("it is {}, not a regular file", kind_of(mode));
  return fd >= 0 ? fd : -1;
}

int open_regular_file(const std::string& path) {
  mode_t mode = 0;
  const int fd = open_checked(path, mode);
  if (fd == -1) FSDP_FAIL("cannot open {}: {}", path, std::strerror(errno));
  if (fd == -2) FSDP_FAIL("{} is {}, not a regular file", path, kind_of(mode));
  return fd;
}

std::string read_regular_file(const std::string& path) {
  const int fd = open_regular_file(path);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      FSDP_FAIL("cannot read {}: {}", path, std::strerror(err));
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

std::FILE* open_regular_file_stream(const std::string& path, const char* mode) {
  const std::string m = mode;
  FSDP_CHECK(m == "rb" || m == "w" || m == "a", "open_regular_file_stream: mode '{}' is not rb, w or a", m);
  int fd = -1;
  if (m == "rb") {
    fd = open_regular_file(path);
  } else {
    // O_NONBLOCK: opening a FIFO for writing with no reader fails at once (ENXIO) instead of
    // waiting for one; O_TRUNC does nothing to a FIFO or a device, so checking after is safe.
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (m == "a" ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0 && errno == ENXIO) FSDP_FAIL("{} is a FIFO (named pipe), not a regular file", path);
    if (fd < 0) FSDP_FAIL("cannot open {}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      FSDP_FAIL("{} is {}, not a regular file", path, kind_of(st.st_mode));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
  std::FILE* f = ::fdopen(fd, m.c_str());
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    FSDP_FAIL("cannot open {}: {}", path, std::strerror(err));
  }
  return f;
}

}  // namespace fsdp
