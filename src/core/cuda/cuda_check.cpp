// The message behind FSDP_CUDA_CHECK (fsdp/core/cuda_check.h): the call, where, the
// device, the host and the runtime's words for the error; in the emulation build also the
// emulator's explanation (which allocation, which kernel, block and thread).
#include "fsdp/core/cuda_check.h"

#include <unistd.h>

#include <string>

#include "fsdp/core/error.h"

namespace fsdp::cuda {

void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  int device = -1;
  (void)cudaGetDevice(&device);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string detail;
#if defined(FSDP_CUDA_EMULATION)
  detail = fsdpEmuLastErrorDetail();
#endif
  (void)cudaGetLastError();  // consumed here: a later launch check must not report it again
  throw_error(file, line, nullptr,
              fmt::format("{} failed on cuda:{} (host {}): {} ({}){}{}", call, device, host, cudaGetErrorString(err),
                          cudaGetErrorName(err), detail.empty() ? "" : "; emulator: ", detail));
}

void cublas_fail(int status, const char* name, const char* text, const char* call, const char* file, int line) {
  int device = -1;
  (void)cudaGetDevice(&device);
  std::string detail;
#if defined(FSDP_CUDA_EMULATION)
  detail = fsdpEmuLastErrorDetail();
#endif
  throw_error(file, line, nullptr,
              fmt::format("{} failed on cuda:{}: {} ({}, status {}){}{}", call, device, text, name, status,
                          detail.empty() ? "" : "; emulator: ", detail));
}

}  // namespace fsdp::cuda
