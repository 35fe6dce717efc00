// One checking layer for preconditions (and, later, CUDA / cuBLAS / NCCL / MPI calls).
// A failed check throws fsdp::Error carrying the condition, file:line and a message, so
// bad input produces one clear error instead of undefined behaviour.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace fsdp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace fsdp

// FSDP_CHECK(cond, "fmt {}", args...): throws fsdp::Error naming the failed condition.
#define FSDP_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::fsdp::throw_error(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                             \
  } while (0)

// FSDP_FAIL("fmt {}", args...): unconditional error.
#define FSDP_FAIL(...) ::fsdp::throw_error(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))
