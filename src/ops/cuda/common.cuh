// Device helpers the CUDA kernels share (include from .cu files only; no fmt).
//
// Element types: kernels read and write float32, float64, bfloat16 and float16 through
// Elem<T>, computing in float (in double for float64). The 16-bit types are carried as
// their raw bits (fsdp::bf16 / fsdp::f16 from dtype.h, the tensors' own element types),
// and converted by the same bit-exact rounding as dtype.h, written here once more for
// device code: a CUDA cast gives the CPU cast's bits, NaN payloads included.
//
// Reductions: warp_sum is a butterfly over __shfl_xor_sync, block_sum combines the
// warps' sums through shared memory in warp order. Both fix the order of every addition
// from the block size alone, so a reduction launched with a grid that depends only on
// the problem size gives the same bits on every run and every GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/core/cuda_launch.h"
#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- 16-bit float conversions (dtype.h's, for device code) ------------------------------
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return __uint_as_float(sign);
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return __uint_as_float(sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13));
  }
  return __uint_as_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

__device__ __forceinline__ uint16_t float_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                  // subnormal or zero: |f| < 2^-14
    if (abs < 0x33000000u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t drop = 126u - (abs >> 23);
    uint32_t half = mant >> drop;
    const uint32_t rem = mant & ((1u << drop) - 1u);
    const uint32_t halfway = 1u << (drop - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t h = ((abs >> 23) - 127 + 15) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

// double -> float rounding to odd, so that a second rounding to bf16/f16 is correct
// (see src/ops/cpu/elementwise.cpp).
__device__ __forceinline__ float double_to_float_odd(double d) {
  float f = float(d);
  if (double(f) == d || d != d) return f;
  uint32_t u = __float_as_uint(f);
  if (fabs(double(f)) > fabs(d)) u -= 1u;  // toward zero (also turns inf into FLT_MAX)
  return __uint_as_float(u | 1u);
}

// ---- element access ------------------------------------------------------------------
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  using acc = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
  __device__ static float from_double(double v) { return float(v); }
};
template <>
struct Elem<double> {
  using acc = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
  __device__ static double from_double(double v) { return v; }
};
template <>
struct Elem<bf16> {
  using acc = float;
  __device__ static float load(bf16 v) { return bf16_bits_to_float(v.bits); }
  __device__ static bf16 store(float v) { return bf16{float_to_bf16_bits(v)}; }
  __device__ static bf16 from_double(double v) { return bf16{float_to_bf16_bits(double_to_float_odd(v))}; }
};
template <>
struct Elem<f16> {
  using acc = float;
  __device__ static float load(f16 v) { return f16_bits_to_float(v.bits); }
  __device__ static f16 store(float v) { return f16{float_to_f16_bits(v)}; }
  __device__ static f16 from_double(double v) { return f16{float_to_f16_bits(double_to_float_odd(v))}; }
};

// The element type of the per-row statistics a kernel writes or reads (RMSNorm's rstd,
// attention's log-sum-exp, per-token losses): the type of stat_dtype(), the host's one rule
// in fsdp/core/dtype.h, so the kernels and the tensors the host allocates cannot disagree.
template <typename T>
using Stat = std::conditional_t<stat_dtype(dtype_of<T>) == DType::F64, double, float>;

// Calls f(T{}) with T the element type of the floating dtype t (nothing for other dtypes):
// one switch for launchers whose template chain takes the element type first.
template <typename F>
void with_element_type(DType t, F&& f) {
  if (t == DType::F32) return f(float{});
  if (t == DType::F64) return f(double{});
  if (t == DType::BF16) return f(bf16{});
  if (t == DType::F16) return f(f16{});
}

// ---- bad input (Note [Device error record] in fsdp/core/cuda.h) ------------------------
// Records an error unless one is recorded already: the thread that claims the record
// fills it in; the host reads it only after waiting for the kernel.
__device__ __forceinline__ void report_device_error(DeviceErrorRecord* r, DeviceErrorOp op, int64_t position,
                                                    int64_t value, int64_t bound, int64_t ignore_index = 0) {
  if (atomicCAS(&r->op, 0u, uint32_t(op)) != 0u) return;
  r->position = position;
  r->value = value;
  r->bound = bound;
  r->ignore_index = ignore_index;
}

// ---- exp and log in the compute type (float, or double for float64) --------------------
__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

// ---- reductions ------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 values in shared memory; callers reusing it must __syncthreads first.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  return total;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  return v;
}

// Maximum over the block, as block_sum (same requirements on blockDim and scratch).
template <typename T>
__device__ __forceinline__ T block_max(T v, T* scratch, T lowest) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : lowest;
  return warp_max(total);
}

// ---- 16-byte accesses -------------------------------------------------------------------
// Note [Packed accesses]
// The bandwidth-bound flat kernels (add, scale, fill, cast, AdamW) move a Pack of
// kPackBytes / sizeof(T) elements per access, one 128-bit load or store (LDG.128/STG.128)
// instead of 4-8 narrow ones, when every pointer of the launch is aligned to its pack
// (packs_fit on the host); the n % width tail and any launch with a misaligned pointer (a
// narrowed view at an odd offset) take the element loop. Each element's arithmetic is
// unchanged, so the results are the scalar loop's bits. A GPU faults on a misaligned
// vector access where x86 does not, so in the emulation build load_pack/store_pack check
// the alignment themselves and fail the launch as the GPU would.
constexpr int kPackBytes = 16;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename P>
__device__ __forceinline__ void check_pack_alignment(const void* p) {
#if defined(FSDP_CUDA_EMULATION)
  if (reinterpret_cast<uintptr_t>(p) % alignof(P) != 0)
    ::fsdp_emu::device_fault(716 /* cudaErrorMisalignedAddress */, "misaligned vector access (load_pack/store_pack)");
#else
  (void)p;
#endif
}

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  check_pack_alignment<Pack<T, N>>(p);
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& v) {
  check_pack_alignment<Pack<T, N>>(p);
  *reinterpret_cast<Pack<T, N>*>(p) = v;
}

// Whether every pointer is aligned to `bytes` (host side: picks the packed kernel).
template <typename... P>
inline bool packs_fit(size_t bytes, const P*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % bytes == 0) && ...);
}

// A grid-stride loop over n elements that hands pack_fn(i) the first index of each whole
// pack of W elements when `packed` (every pointer fits, Note [Packed accesses]) and
// elem_fn(i) every element after the last whole pack, or every element when not packed.
template <int W, typename PackFn, typename ElemFn>
__device__ __forceinline__ void grid_stride_packed(int64_t n, bool packed, PackFn&& pack_fn, ElemFn&& elem_fn) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if (packed) {
    const int64_t packs = n / W;
    for (int64_t k = first; k < packs; k += stride) pack_fn(k * W);
    tail = packs * W;
  }
  for (int64_t i = tail + first; i < n; i += stride) elem_fn(i);
}

// A grid for a grid-stride loop over n items: enough blocks to fill a large GPU, never
// more than n needs, a function of n only (deterministic reductions rely on that).
inline unsigned grid_for(int64_t n, int threads, unsigned max_blocks = 4096) {
  const unsigned b = blocks_for(n, threads);
  return b < max_blocks ? b : max_blocks;
}

// The grid of a grid_stride_packed loop: packs of `width` elements when packed.
inline unsigned grid_for_packed(int64_t n, int width, bool packed, int threads) {
  return grid_for(packed ? (n + width - 1) / width : n, threads);
}

}  // namespace fsdp::cuda
