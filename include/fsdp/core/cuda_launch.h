// What kernel sources (.cu) share, so that one source serves nvcc and the emulation build
// (see Note [SIMT emulation] in src/cuda_emu/simt.cpp):
//
//   FSDP_LAUNCH(kernel, grid, block, smem_bytes, stream, args...);
//     launches and checks: a bad configuration (too many threads, too much shared memory),
//     and in emulation any fault inside the kernel, throws fsdp::Error naming the kernel
//     and the launch site. A template kernel goes in parentheses: FSDP_LAUNCH((k<T, 4>), ...).
//   FSDP_DYNAMIC_SHARED(T, name);
//     declares `T* name` pointing at the block's dynamic shared memory: the spelling of
//     `extern __shared__ T name[]` that also compiles as C++.
//
// Includes no fmt (nvcc 13 cannot compile it in C++20), so .cu files can include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "fsdp/core/cuda_check.h"

namespace fsdp::cuda {

template <typename... P, typename... A>
cudaError_t launch_kernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, A&&... args) {
#if defined(FSDP_CUDA_EMULATION)
  return ::fsdp_emu::launch(name, kernel, grid, block, smem, stream, std::forward<A>(args)...);
#elif defined(__CUDACC__)
  (void)name;
  kernel<<<grid, block, smem, stream>>>(static_cast<P>(std::forward<A>(args))...);
  return cudaGetLastError();
#else
  static_assert(sizeof(kernel) == 0, "kernels are launched from .cu files (nvcc) or in the emulation build");
  return cudaErrorNotSupported;
#endif
}

// Blocks of `threads` covering n items: at least one block, so never an empty grid.
inline unsigned int blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : b);
}

}  // namespace fsdp::cuda

#define FSDP_LAUNCH(kernel, grid, block, smem, stream, ...)                                                   \
  ::fsdp::cuda::check(::fsdp::cuda::launch_kernel(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__), \
                      "launch of " #kernel, __FILE__, __LINE__)

#if defined(FSDP_CUDA_EMULATION)
#define FSDP_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::fsdp_emu::dynamic_shared_memory())
#else
#define FSDP_DYNAMIC_SHARED(T, name)                            \
  extern __shared__ __align__(16) unsigned char name##_bytes_[]; \
  T* name = reinterpret_cast<T*>(name##_bytes_)
#endif
