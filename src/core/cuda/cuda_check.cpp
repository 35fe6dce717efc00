// The message behind FSDP_CUDA_CHECK (fsdp/core/cuda_check.h): the call, where, the
// device, the host and the runtime's words for the error; in the emulation build also the
// emulator's explanation (which allocation, which kernel, block and thread).
#include "fsdp/core/cuda_check.h"

#include <string>

#include "fsdp/core/error.h"

namespace fsdp::cuda {

namespace {

std::string emulator_detail() {
#if defined(FSDP_CUDA_EMULATION)
  const std::string d = fsdpEmuLastErrorDetail();
  return d.empty() ? d : "; emulator: " + d;
#else
  return {};
#endif
}

std::string current_device() {
  int device = -1;
  (void)cudaGetDevice(&device);
  return fmt::format("cuda:{}", device);
}

}  // namespace

void cuda_fail(cudaError_t err, const char* call, const char* file, int line, const char* who) {
  const std::string detail = emulator_detail();
  (void)cudaGetLastError();  // consumed here: a later launch check must not report it again
  fail_call({call, who != nullptr ? std::string(who) : fmt::format("{} (host {})", current_device(), host_name()),
             fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err)), detail, file, line});
}

void cublas_fail(int status, const char* name, const char* text, const char* call, const char* file, int line) {
  fail_call({call, current_device(), fmt::format("{} ({}, status {})", text, name, status), emulator_detail(), file,
             line});
}

}  // namespace fsdp::cuda
