// Proving an output directory writable at start-up; see writable_dir.h.
#include "fsdp/core/writable_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "fsdp/core/error.h"

namespace fsdp {

namespace fs = std::filesystem;

void ensure_writable_dir(const std::string& dir, std::string_view key) {
  FSDP_CHECK(!dir.empty(), "{} is empty: it must name a directory", key);
  // Every std::filesystem call with an error_code: a name past NAME_MAX or PATH_MAX, or a
  // symlink loop, once escaped as "filesystem error: status: File name too long [...]".
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    FSDP_CHECK(fs::is_directory(st), "{} {} is {}, not a directory", key, dir,
               fs::is_regular_file(st) ? "a file" : "not a directory");
  } else {
    fs::create_directories(dir, ec);
    // Another rank may have created it a moment ago: only a directory that still is not
    // there is a failure.
    std::error_code again;
    FSDP_CHECK(!ec || fs::is_directory(dir, again), "{} {}: cannot create it: {}", key, dir, ec.message());
  }
  const std::string probe = (fs::path(dir) / (".fsdp_write_probe." + host_name() + "." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FSDP_CHECK(fd >= 0, "{} {}: cannot write in it: {}", key, dir, std::strerror(errno));
  static constexpr char kText[] = "fsdp_train write probe\n";
  const bool wrote = ::write(fd, kText, sizeof kText - 1) == ssize_t(sizeof kText - 1) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  FSDP_CHECK(wrote, "{} {}: cannot write in it: {}", key, dir, std::strerror(err));
}

}  // namespace fsdp
