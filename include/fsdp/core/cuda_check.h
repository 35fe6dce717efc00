// The one checking layer for CUDA runtime and cuBLASLt calls (ggml's CUDA_CHECK, nccl-tests'
// CUDACHECK):
//   FSDP_CUDA_CHECK(cudaMemcpyAsync(...));
// throws fsdp::Error (fsdp/core/error.h's fail_call) naming the call, the current device,
// the host and the runtime's own message (in the emulation build also the emulator's
// explanation); file:line goes to the error's where(). Usable
// from .cu files: this header includes no fmt (nvcc 13 cannot compile fmt 9 in C++20
// mode); the message is formatted in src/core/cuda/cuda_check.cpp.
#pragma once

#include <cuda_runtime.h>

namespace fsdp::cuda {

// `who` names where the call ran when the caller knows more than the device (the NCCL
// communicator's group and rank); null = the current device and the host.
[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const char* file, int line, const char* who = nullptr);
// A failed cuBLAS(Lt) call: its status, the library's name and words for it.
[[noreturn]] void cublas_fail(int status, const char* name, const char* text, const char* call, const char* file,
                              int line);

inline void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) [[unlikely]]
    cuda_fail(err, call, file, line);
}

}  // namespace fsdp::cuda

#define FSDP_CUDA_CHECK(call) ::fsdp::cuda::check((call), #call, __FILE__, __LINE__)

// For files that include <cublasLt.h>.
#define FSDP_CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                          \
    const cublasStatus_t fsdp_cublas_status_ = (call);                                                         \
    if (fsdp_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                              \
      ::fsdp::cuda::cublas_fail(int(fsdp_cublas_status_), cublasLtGetStatusName(fsdp_cublas_status_),            \
                                cublasLtGetStatusString(fsdp_cublas_status_), #call, __FILE__, __LINE__);      \
  } while (0)
