// Shared by the libFuzzer targets in tests/fuzz (each one file, fuzz_<what>.cpp, defining
// LLVMFuzzerTestOneInput): a scratch folder for the readers that take paths, and the one
// rule every target enforces. A target feeds its input to a reader of untrusted files; the
// reader may refuse it only with fsdp::Error (the one clear line a user gets). Anything
// else is a finding: a crash, a sanitizer report, a leak, an allocation past libFuzzer's
// -rss_limit_mb, or another exception, which escapes LLVMFuzzerTestOneInput and aborts.
// A target may also check properties of what the reader accepted (FUZZ_EXPECT).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace fsdp::fuzz {

// A folder of this process's own, made on first use (in /dev/shm when there is one: the
// readers map their files, and a page-cache file costs no disk), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string templ = std::string(base) + "/fsdp_fuzz_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Replaces `path`'s content with the bytes (a new file each time: a reader's mapping of the
// previous input never sees this one).
inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out.good()) std::abort();
}

inline void write_file(const std::filesystem::path& path, std::string_view text) {
  write_file(path, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// A property of accepted input that does not hold: report it as a crash, with the reason.
[[noreturn]] inline void property_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: property failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace fsdp::fuzz

#define FUZZ_EXPECT(cond) ((cond) ? (void)0 : ::fsdp::fuzz::property_failed(#cond, __FILE__, __LINE__))
