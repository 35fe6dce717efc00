// The one error layer. A failed precondition (FSDP_CHECK / FSDP_FAIL) or a failed call into
// CUDA, cuBLAS(Lt), NCCL or MPI (fail_call, behind FSDP_CUDA_CHECK, FSDP_MPI_CHECK, ...)
// throws fsdp::Error, whose what() is the one line a user reads — naming the file, key,
// tensor, call or rank at fault — and whose where() keeps the internals (the failed
// condition, the source file and line) for the debug log (cli/error_report.h prints it
// under SPDLOG_LEVEL=debug), not for the user.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace fsdp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string where = {})
      : std::runtime_error(what), where_(std::move(where)) {}
  // "check `cond` failed at src/x.cpp:12" or "at src/x.cpp:12"; empty when unknown.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

[[noreturn]] void throw_error(const char* file, int line, const char* cond, const std::string& msg);

// A failed library call, described once for every library: "<call> failed on <who>:
// <error><detail>", e.g. "ncclAllReduce(...) failed on group 'world' (rank 1 of 2, cuda:1,
// host n01): unhandled system error (ncclResult_t 2); NCCL says: ...".
struct CallFailure {
  std::string call;    // the call as written
  std::string who;     // device, group, rank and host it ran on
  std::string error;   // the library's words for the failure, and its code
  std::string detail;  // more from the library (its last error, the emulator's explanation); may be empty
  const char* file = "";
  int line = 0;
};
[[noreturn]] void fail_call(const CallFailure& f);

// This machine's host name, for messages that name where something failed.
std::string host_name();

}  // namespace fsdp

// FSDP_CHECK(cond, "fmt {}", args...): throws fsdp::Error with the message; the failed
// condition and the place go to where().
#define FSDP_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::fsdp::throw_error(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                             \
  } while (0)

// FSDP_FAIL("fmt {}", args...): unconditional error.
#define FSDP_FAIL(...) ::fsdp::throw_error(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))
