// The SIMT half of the CUDA emulator (FSDP_CUDA_EMULATION): what nvcc gives device code,
// for the host compiler. Included by the stand-in cuda_runtime.h, which the emulation build
// force-includes into every .cu file exactly as nvcc does.
//
// Model (see Note [SIMT emulation] in src/cuda_emu/simt.cpp for the scheduler):
//   * a launch runs its grid block by block, in order, on the calling host thread, after
//     the launch limits are checked (threads per block, block and grid extents, dynamic
//     shared memory against 48 KiB or the kernel's opt-in maximum);
//   * a block's blockDim threads are fibers (own stacks, cooperative switching): a thread
//     runs until it reaches __syncthreads, a warp collective, or its end;
//   * __syncthreads releases when every live thread of the block waits there; a thread
//     that ends while others wait is reported (a divergent barrier);
//   * warp collectives (__shfl*_sync, __all/__any/__ballot_sync, __syncwarp, and the
//     wmma::*_sync matrix operations of the stand-in mma.h) execute in lockstep at the
//     call: they complete once every lane named in the mask has reached a collective of the
//     same kind with the same mask; any other combination (a lane of the mask that has
//     ended or does not exist, a caller outside its own mask, mismatched kinds or masks,
//     a wmma operation whose uniform arguments differ between lanes) fails the launch with
//     a message naming kernel, block and thread. A wmma operation executes as soon as its
//     warp's last lane arrives, and that warp runs on ahead of the threads after it, so a
//     missing barrier around its shared-memory tiles shows (Note [SIMT emulation]);
//   * __shared__ is `static`: one instance per kernel, which every thread of the running
//     block sees (blocks never run concurrently in the emulator), and which ASan guards
//     with redzones. Dynamic shared memory is a fresh heap buffer per launch, filled with
//     0xff bytes (NaN) before each block: use FSDP_DYNAMIC_SHARED from
//     fsdp/core/cuda_launch.h instead of `extern __shared__`, which C++ cannot express;
//   * atomics are plain read-modify-writes: threads switch only at the points above and
//     only one kernel runs at a time, so nothing can interleave with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- qualifiers -------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static
#define __managed__
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __CUDA_EMULATION__ 1

// ---- vector index types -------------------------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaError_t : int;

namespace fsdp_emu {

// What one emulated thread sees; the scheduler points `tl_thread` at the running one.
struct ThreadInfo {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned int linear;  // x + y * bx + z * bx * by
};
extern thread_local const ThreadInfo* tl_thread;

inline const ThreadInfo& self() { return *tl_thread; }

// ---- collectives (implemented in simt.cpp; they suspend the calling fiber) ----
enum class WarpOp : int { Shfl, ShflUp, ShflDown, ShflXor, All, Any, Ballot, Sync, Matrix };
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
void syncthreads();
int syncthreads_reduce(int kind, int pred);  // 0: count, 1: and, 2: or
[[noreturn]] void device_fault(int error, const char* what);  // fails the running launch
void* dynamic_shared_memory();
// 0: threads resume in increasing index order, 1: decreasing, -1: as FSDP_EMU_SCHEDULE says.
void set_schedule(int reverse);
unsigned active_mask();

// A warp-synchronous matrix operation (wmma::load/store_matrix_sync, mma_sync; mma.h):
// every lane parks with its own descriptor at a full-mask collective (WarpOp::Matrix).
// Once all 32 lanes are there, the scheduler checks that they reached the same operation
// (`run` and `name`) with the same uniform arguments (`mem`, `ldm`, `layout`: CUDA requires
// them equal across the warp) and calls `run` once for the whole warp with every lane's
// descriptor in lane order, before any lane resumes: the operation reads and writes the
// lanes' fragments (`frag`, on their stacks) as one warp-wide instruction does.
struct WarpMatrixOp {
  const char* name;
  void (*run)(WarpMatrixOp* const* lanes);
  const void* mem;
  unsigned ldm;
  int layout;
  void* frag[4];
};
void warp_matrix_op(WarpMatrixOp* op);

template <typename T>
uint64_t to_bits(const T& v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

// ---- launching -------------------------------------------------------------------------
struct LaunchSpec {
  const char* name;      // the kernel as written at the launch site
  const void* kernel;    // identity, for per-kernel attributes
  dim3 grid, block;
  size_t dynamic_smem;
  cudaStream_t stream;
  void (*body)(void* ctx);  // runs the kernel for the current thread
  void* ctx;
  const void* const* pointer_args;  // the launch's raw-pointer arguments, checked to be device memory
  const int* pointer_arg_index;
  int num_pointer_args;
};
cudaError_t launch_erased(const LaunchSpec& spec);

template <typename T>
using param_t = std::remove_cv_t<std::remove_reference_t<T>>;

// Runs kernel(args...) over grid x block: the arguments are converted to the kernel's
// parameter types once (as a launch copies them into the parameter buffer), and each
// thread calls the kernel with its own copies.
template <typename... P, typename... A>
cudaError_t launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  using Params = std::tuple<param_t<P>...>;
  struct Ctx {
    void (*kernel)(P...);
    Params params;
  } ctx{kernel, Params(static_cast<param_t<P>>(std::forward<A>(args))...)};
  constexpr int n = int(sizeof...(P));
  const void* ptrs[n > 0 ? n : 1] = {};
  int index[n > 0 ? n : 1] = {};
  int np = 0;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (std::is_pointer_v<std::tuple_element_t<I, Params>>) {
            ptrs[np] = reinterpret_cast<const void*>(std::get<I>(ctx.params));
            index[np++] = int(I);
          }
        }(),
        ...);
  }(std::index_sequence_for<P...>{});
  LaunchSpec spec{name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
                  [](void* c) {
                    auto* x = static_cast<Ctx*>(c);
                    std::apply(x->kernel, x->params);
                  },
                  &ctx, ptrs, index, np};
  return launch_erased(spec);
}

}  // namespace fsdp_emu

// ---- built-in variables -----------------------------------------------------------------
#define threadIdx (::fsdp_emu::tl_thread->thread_idx)
#define blockIdx (::fsdp_emu::tl_thread->block_idx)
#define blockDim (::fsdp_emu::tl_thread->block_dim)
#define gridDim (::fsdp_emu::tl_thread->grid_dim)
constexpr int warpSize = 32;

// ---- synchronisation and warp intrinsics ----------------------------------------------------
inline void __syncthreads() { ::fsdp_emu::syncthreads(); }
inline int __syncthreads_count(int pred) { return ::fsdp_emu::syncthreads_reduce(0, pred); }
inline int __syncthreads_and(int pred) { return ::fsdp_emu::syncthreads_reduce(1, pred); }
inline int __syncthreads_or(int pred) { return ::fsdp_emu::syncthreads_reduce(2, pred); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::fsdp_emu::warp_collective(::fsdp_emu::WarpOp::Sync, mask, 0, 0, 32);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline unsigned __activemask() { return ::fsdp_emu::active_mask(); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  using namespace ::fsdp_emu;
  return from_bits<T>(warp_collective(WarpOp::Shfl, mask, to_bits(v), src_lane, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::fsdp_emu;
  return from_bits<T>(warp_collective(WarpOp::ShflUp, mask, to_bits(v), int(delta), width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::fsdp_emu;
  return from_bits<T>(warp_collective(WarpOp::ShflDown, mask, to_bits(v), int(delta), width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  using namespace ::fsdp_emu;
  return from_bits<T>(warp_collective(WarpOp::ShflXor, mask, to_bits(v), lane_mask, width));
}
inline int __all_sync(unsigned mask, int pred) {
  return int(::fsdp_emu::warp_collective(::fsdp_emu::WarpOp::All, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return int(::fsdp_emu::warp_collective(::fsdp_emu::WarpOp::Any, mask, pred != 0, 0, 32));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return unsigned(::fsdp_emu::warp_collective(::fsdp_emu::WarpOp::Ballot, mask, pred != 0, 0, 32));
}

[[noreturn]] inline void __trap() { ::fsdp_emu::device_fault(719 /* cudaErrorLaunchFailure */, "__trap() called"); }

// ---- atomics: see the header comment for why plain read-modify-writes are exact --------------
#define FSDP_EMU_ATOMIC(name, T, expr) \
  inline T name(T* p, T v) {           \
    const T old = *p;                  \
    *p = (expr);                       \
    return old;                        \
  }
FSDP_EMU_ATOMIC(atomicAdd, int, old + v)
FSDP_EMU_ATOMIC(atomicAdd, unsigned int, old + v)
FSDP_EMU_ATOMIC(atomicAdd, unsigned long long, old + v)
FSDP_EMU_ATOMIC(atomicAdd, float, old + v)
FSDP_EMU_ATOMIC(atomicAdd, double, old + v)
FSDP_EMU_ATOMIC(atomicSub, int, old - v)
FSDP_EMU_ATOMIC(atomicSub, unsigned int, old - v)
FSDP_EMU_ATOMIC(atomicMax, int, old > v ? old : v)
FSDP_EMU_ATOMIC(atomicMax, unsigned int, old > v ? old : v)
FSDP_EMU_ATOMIC(atomicMax, unsigned long long, old > v ? old : v)
FSDP_EMU_ATOMIC(atomicMin, int, old < v ? old : v)
FSDP_EMU_ATOMIC(atomicMin, unsigned int, old < v ? old : v)
FSDP_EMU_ATOMIC(atomicMin, unsigned long long, old < v ? old : v)
FSDP_EMU_ATOMIC(atomicExch, int, v)
FSDP_EMU_ATOMIC(atomicExch, unsigned int, v)
FSDP_EMU_ATOMIC(atomicExch, unsigned long long, v)
FSDP_EMU_ATOMIC(atomicExch, float, v)
FSDP_EMU_ATOMIC(atomicOr, int, old | v)
FSDP_EMU_ATOMIC(atomicOr, unsigned int, old | v)
FSDP_EMU_ATOMIC(atomicAnd, int, old & v)
FSDP_EMU_ATOMIC(atomicAnd, unsigned int, old & v)
FSDP_EMU_ATOMIC(atomicXor, int, old ^ v)
FSDP_EMU_ATOMIC(atomicXor, unsigned int, old ^ v)
#undef FSDP_EMU_ATOMIC
inline unsigned int atomicInc(unsigned int* p, unsigned int limit) {
  const unsigned int old = *p;
  *p = old >= limit ? 0u : old + 1u;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned int> || std::is_same_v<T, unsigned long long> ||
                    std::is_same_v<T, unsigned short>,
                "atomicCAS exists for int, unsigned, unsigned long long and unsigned short");
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- the device math and bit intrinsics the kernels use -------------------------------------
#include <cmath>
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
// Round-to-nearest multiply and add that are never contracted into an FMA. GCC contracts
// a * b + c even with -std=c++20 (measured with GCC 12 at -O3 -march=native), so the result
// passes through an empty asm the compiler must materialise it for.
template <typename T>
inline T fsdp_emu_materialised(T v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#else
  volatile T keep = v;
  v = keep;
#endif
  return v;
}
inline float __fmul_rn(float a, float b) { return fsdp_emu_materialised(a * b); }
inline float __fadd_rn(float a, float b) { return fsdp_emu_materialised(a + b); }
inline double __dmul_rn(double a, double b) { return fsdp_emu_materialised(a * b); }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned int x) { return x == 0 ? 32 : __builtin_clz(x); }
inline int __ffs(unsigned int x) { return __builtin_ffs(int(x)); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline long long __double_as_longlong(double d) {
  long long i;
  std::memcpy(&i, &d, 8);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
// CUDA's unqualified device min/max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
