// A floating-point result rounded on its own. GCC contracts a * b + c into one fused
// multiply-add even in ISO C++ mode (measured: GCC 12, -O3 -march=native -std=c++20), which
// rounds once where two roundings were meant; kernels that must give another implementation's
// bits (bitsandbytes' separate multiply and add, the CUDA kernels' __fmul_rn / __fadd_rn)
// pass each product through rounded(), an empty asm the compiler has to materialise it for.
// (The CUDA emulator's __fmul_rn does the same on its side: src/cuda_emu stands alone.)
#pragma once

namespace fsdp::cpu {

template <typename T>
inline T rounded(T v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#else
  volatile T keep = v;
  v = keep;
#endif
  return v;
}

}  // namespace fsdp::cpu
