// Self-tests of the CUDA emulator (src/cuda_emu): indexing, shared memory and barriers,
// warp shuffles and votes in lockstep, atomics, the 16-bit float conversions, the WMMA
// stand-in (mma.h: a GEMM in every layout, the misuse it must fault on), the launch
// limits, the faults it must report instead of running on, and the runtime stand-ins'
// checks. Emulation build only: these kernels live in a .cpp, which nvcc never sees.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fsdp/core/cuda_launch.h"
#include "fsdp/core/dtype.h"
#include "fsdp/core/error.h"

namespace {

// ---- helpers --------------------------------------------------------------------------------
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count, const T* init = nullptr) : n(count) {
    FSDP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)));
    if (init != nullptr) FSDP_CUDA_CHECK(cudaMemcpy(ptr, init, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size(), v.data()) {}
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    FSDP_CUDA_CHECK(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

// Runs f, which must throw fsdp::Error whose message contains every one of `parts`, and
// whose where() (the debug log's source location) contains every one of `in_where`.
template <typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts, std::initializer_list<const char*> in_where = {}) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const fsdp::Error& e) {
    const std::string msg = e.what(), where = e.where();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    for (const char* p : in_where) EXPECT_NE(where.find(p), std::string::npos) << "missing '" << p << "' in: " << where;
  }
}

// ---- kernels --------------------------------------------------------------------------------
__global__ void index_kernel(int* out) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[bx * per_block + tx] = int(bx * 1000 + tx);
}

// Reverses each block's slice through static shared memory.
__global__ void reverse_kernel(const float* in, float* out, int n) {
  __shared__ float buf[256];
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  const int t = int(threadIdx.x);
  buf[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  const int base = int(blockIdx.x * blockDim.x);
  const int len = min(int(blockDim.x), n - base);
  if (t < len) out[base + t] = buf[len - 1 - t];
}

// Block sum through dynamic shared memory: a tree with a barrier per level.
__global__ void block_sum_kernel(const float* in, float* out, int n) {
  FSDP_DYNAMIC_SHARED(float, s);
  const int t = int(threadIdx.x);
  const int i = int(blockIdx.x * blockDim.x) + t;
  s[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = int(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// One warp: every shuffle and vote, each result written per lane.
__global__ void warp_kernel(int* out) {
  const int lane = int(threadIdx.x);
  int v = lane + 1;
  int sum = v;
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // butterfly: everyone 528
  int down = v;
  for (int o = 16; o > 0; o /= 2) down += __shfl_down_sync(0xffffffffu, down, o);  // lane 0: 528
  int scan = v;
  for (int o = 1; o < 32; o *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, scan, o);
    if (lane >= o) scan += up;  // inclusive prefix sum
  }
  const int bcast = __shfl_sync(0xffffffffu, v * 10, 5);
  const int group8 = __shfl_sync(0xffffffffu, lane, 2, 8);  // lane 2 of each group of 8
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  const int any = __any_sync(0xffffffffu, lane == 31);
  const int all = __all_sync(0xffffffffu, lane < 31);
  double d = 0.5 * lane;
  d = __shfl_xor_sync(0xffffffffu, d, 1);  // 8-byte values move whole
  out[lane * 9 + 0] = sum;
  out[lane * 9 + 1] = down;
  out[lane * 9 + 2] = scan;
  out[lane * 9 + 3] = bcast;
  out[lane * 9 + 4] = group8;
  out[lane * 9 + 5] = int(ballot);
  out[lane * 9 + 6] = any;
  out[lane * 9 + 7] = all;
  out[lane * 9 + 8] = int(d * 2);
}

// Lanes 0-15 and 16-31 shuffle in two independent half-warp groups, in divergent branches.
__global__ void half_warp_kernel(int* out) {
  const int lane = int(threadIdx.x);
  int r;
  if (lane < 16) {
    r = __shfl_xor_sync(0x0000ffffu, lane, 8);
  } else {
    __syncwarp(0xffff0000u);
    r = __shfl_xor_sync(0xffff0000u, lane * 100, 1);
  }
  out[lane] = r;
}

__global__ void atomics_kernel(float* fsum, int* imax, unsigned* count, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  atomicAdd(fsum, 1.0f);
  atomicMax(imax, (i * 7919) % 1000);
  atomicInc(count, 1u << 30);
}

__global__ void syncthreads_count_kernel(int* out) {
  const int c = __syncthreads_count(threadIdx.x % 5 == 0);
  const int a = __syncthreads_and(threadIdx.x < 1000);
  const int o = __syncthreads_or(threadIdx.x == 77);
  if (threadIdx.x == 0) {
    out[0] = c;
    out[1] = a;
    out[2] = o;
  }
}

__global__ void convert_kernel(const float* in, unsigned short* bf, unsigned short* hf, float* back, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const __nv_bfloat16 b = __float2bfloat16(in[i]);
  const __half h = __float2half_rn(in[i]);
  bf[i] = __bfloat16_as_ushort(b);
  hf[i] = __half_as_ushort(h);
  back[i] = __bfloat162float(b) + __half2float(h);
}

// a * b + c with the product rounded on its own (__fmul_rn / __fadd_rn), and with one fma.
__global__ void rounded_ops_kernel(const float* a, const float* b, const float* c, float* separate, float* fused) {
  const int i = int(threadIdx.x);
  separate[i] = __fadd_rn(__fmul_rn(a[i], b[i]), c[i]);
  fused[i] = fmaf(a[i], b[i], c[i]);
}

__global__ void write_kernel(float* p, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = 1.0f;
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

// Bug: threads past n leave before the barrier the others wait at.
__global__ void divergent_barrier_kernel(float* p, int n) {
  const int i = int(threadIdx.x);
  if (i >= n) return;
  p[i] = 1.0f;
  __syncthreads();
}

// Bug: the mask names all 32 lanes but only 20 threads exist.
__global__ void missing_lane_kernel(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1); }

// Bug: lane 0 exits, the others wait for it in a full-mask shuffle.
__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 0) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
}

// Bug: half the block at __syncthreads, the other half waiting for a warp collective that
// needs lanes stuck at the barrier.
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[0] = __any_sync(0xffffffffu, 1);
  }
}

__global__ void trap_kernel(int* out) {
  if (threadIdx.x == 3 && blockIdx.x == 1) __trap();
  out[0] = 1;
}

// Bug: reads its left neighbour's shared value with no barrier after the writes.
__global__ void missing_barrier_kernel(int* out) {
  FSDP_DYNAMIC_SHARED(int, s);
  const int t = int(threadIdx.x);
  s[t] = t + 1;
  out[t] = t > 0 ? s[t - 1] : 0;  // needs __syncthreads() before this line
}

__global__ void dyn_smem_kernel(float* out) {
  FSDP_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[0];
}

// ---- WMMA ---------------------------------------------------------------------------------
namespace wmma = nvcuda::wmma;
constexpr int kGemmM = 32, kGemmN = 48, kGemmK = 32;

// out = (A B + C) / 2 for A [kGemmM x kGemmK], B [kGemmK x kGemmN], C [kGemmM x kGemmN]
// (row-major, ld ldc); A and B stored in the fragments' layouts (LA, LB) with ld lda, ldb;
// out in `out_layout` with ld ldo. One warp per 16 x 16 tile of out, 6 warps. The halving
// goes through x[], so every element of the accumulator must be among the x[] of its lanes.
template <typename T, typename LA, typename LB>
__global__ void wmma_gemm_kernel(const T* a, int lda, const T* b, int ldb, const float* c, int ldc, float* out,
                                 int ldo, wmma::layout_t out_layout) {
  constexpr bool a_row = std::is_same_v<LA, wmma::row_major>, b_row = std::is_same_v<LB, wmma::row_major>;
  const int w = int(threadIdx.x) / 32, tm = w / (kGemmN / 16), tn = w % (kGemmN / 16);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c + tm * 16 * ldc + tn * 16, unsigned(ldc), wmma::mem_row_major);
  for (int k0 = 0; k0 < kGemmK; k0 += 16) {
    wmma::load_matrix_sync(fa, a + (a_row ? tm * 16 * lda + k0 : k0 * lda + tm * 16), unsigned(lda));
    wmma::load_matrix_sync(fb, b + (b_row ? k0 * ldb + tn * 16 : tn * 16 * ldb + k0), unsigned(ldb));
    wmma::mma_sync(acc, fa, fb, acc);
  }
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= 0.5f;
  const int o = out_layout == wmma::mem_row_major ? tm * 16 * ldo + tn * 16 : tn * 16 * ldo + tm * 16;
  wmma::store_matrix_sync(out + o, acc, unsigned(ldo), out_layout);
}

// Warp 1 fills a 16 x 16 float tile in shared memory with plain stores; warp 0 loads it
// with wmma and writes it out, with or without the __syncthreads it needs in between.
__global__ void wmma_after_plain_stores_kernel(float* out, int with_barrier) {
  FSDP_DYNAMIC_SHARED(unsigned char, raw);
  float* tile = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(raw) + 31) & ~uintptr_t(31));
  const int t = int(threadIdx.x);
  if (t >= 32)
    for (int i = t - 32; i < 256; i += 32) tile[i] = 1.0f;
  if (with_barrier) __syncthreads();
  if (t < 32) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, tile, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
  }
}

// Misuse the emulator must fail the launch on (each mode is a bug), on a 256-aligned
// [64 x 64] bf16 buffer and a float one.
__global__ void wmma_misuse_kernel(const __nv_bfloat16* a, float* f, int mode) {
  const int lane = int(threadIdx.x) % 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  switch (mode) {
    case 0: wmma::load_matrix_sync(fa, a + 8, 64); break;  // 16 bytes past a 32-byte boundary
    case 1: wmma::load_matrix_sync(fa, a, 12); break;      // 24-byte rows
    case 2:                                                // half the warp
      if (lane < 16) wmma::load_matrix_sync(fa, a, 64);
      break;
    case 3: wmma::load_matrix_sync(fa, a + (lane / 16) * 16, 64); break;  // a pointer per lane
    case 4:                                                               // lanes at different operations
      if (lane < 16) wmma::load_matrix_sync(acc, f, 64, wmma::mem_row_major);
      else wmma::store_matrix_sync(f, acc, 64, wmma::mem_row_major);
      break;
    case 5: wmma::store_matrix_sync(f, acc, 6, wmma::mem_col_major); break;  // 24-byte columns
    default: wmma::load_matrix_sync(fa, a, 64); break;                       // valid, given whole warps
  }
}

// ---- tests ----------------------------------------------------------------------------------
TEST(CudaEmulator, DeviceProperties) {
  int n = 0;
  FSDP_CUDA_CHECK(cudaGetDeviceCount(&n));
  EXPECT_GE(n, 1);
  cudaDeviceProp p{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.sharedMemPerBlock, 48u * 1024);
}

TEST(CudaEmulator, IndexingCoversGridAndBlockIn3D) {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const int total = 3 * 2 * 2 * 5 * 3 * 2;
  DeviceBuffer<int> out{size_t(total)};
  FSDP_LAUNCH(index_kernel, grid, block, 0, nullptr, out.ptr);
  const auto v = out.get();
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 30; ++t) EXPECT_EQ(v[size_t(b * 30 + t)], b * 1000 + t);
}

TEST(CudaEmulator, StaticSharedMemoryAndSyncthreads) {
  const int n = 1000;  // 4 blocks of 256, the last one partial
  std::vector<float> in(n);
  std::iota(in.begin(), in.end(), 0.0f);
  DeviceBuffer<float> din(in), dout{size_t(n)};
  FSDP_LAUNCH(reverse_kernel, dim3(4), dim3(256), 0, nullptr, din.ptr, dout.ptr, n);
  const auto out = dout.get();
  for (int b = 0; b < 4; ++b) {
    const int base = b * 256, len = std::min(256, n - base);
    for (int t = 0; t < len; ++t) ASSERT_EQ(out[size_t(base + t)], in[size_t(base + len - 1 - t)]) << b << " " << t;
  }
}

TEST(CudaEmulator, DynamicSharedMemoryReduction) {
  const int n = 3001, threads = 128;
  const int blocks = (n + threads - 1) / threads;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[size_t(i)] = float(i % 17);
  DeviceBuffer<float> din(in), dout{size_t(blocks)};
  FSDP_LAUNCH(block_sum_kernel, dim3(blocks), dim3(threads), threads * sizeof(float), nullptr, din.ptr, dout.ptr, n);
  const auto out = dout.get();
  for (int b = 0; b < blocks; ++b) {
    float expect = 0;
    for (int i = b * threads; i < std::min(n, (b + 1) * threads); ++i) expect += in[size_t(i)];
    EXPECT_EQ(out[size_t(b)], expect);
  }
}

TEST(CudaEmulator, WarpShufflesAndVotesInLockstep) {
  DeviceBuffer<int> out(32 * 9);
  FSDP_LAUNCH(warp_kernel, dim3(1), dim3(32), 0, nullptr, out.ptr);
  const auto v = out.get();
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    const int* r = &v[size_t(l * 9)];
    EXPECT_EQ(r[0], 528) << l;
    if (l == 0) EXPECT_EQ(r[1], 528);
    EXPECT_EQ(r[2], (l + 1) * (l + 2) / 2) << l;
    EXPECT_EQ(r[3], 60) << l;
    EXPECT_EQ(r[4], (l / 8) * 8 + 2) << l;
    EXPECT_EQ(unsigned(r[5]), ballot) << l;
    EXPECT_EQ(r[6], 1) << l;
    EXPECT_EQ(r[7], 0) << l;
    EXPECT_EQ(r[8], l ^ 1) << l;
  }
}

TEST(CudaEmulator, IndependentPartialMasks) {
  DeviceBuffer<int> out(32);
  FSDP_LAUNCH(half_warp_kernel, dim3(1), dim3(32), 0, nullptr, out.ptr);
  const auto v = out.get();
  for (int l = 0; l < 16; ++l) EXPECT_EQ(v[size_t(l)], l ^ 8);
  for (int l = 16; l < 32; ++l) EXPECT_EQ(v[size_t(l)], (l ^ 1) * 100);
}

TEST(CudaEmulator, AtomicsAcrossTheGrid) {
  const int n = 5000;
  DeviceBuffer<float> fsum(1);
  DeviceBuffer<int> imax(1);
  DeviceBuffer<unsigned> count(1);
  FSDP_CUDA_CHECK(cudaMemset(fsum.ptr, 0, 4));
  FSDP_CUDA_CHECK(cudaMemset(imax.ptr, 0, 4));
  FSDP_CUDA_CHECK(cudaMemset(count.ptr, 0, 4));
  FSDP_LAUNCH(atomics_kernel, dim3(20), dim3(256), 0, nullptr, fsum.ptr, imax.ptr, count.ptr, n);
  int expect_max = 0;
  for (int i = 0; i < n; ++i) expect_max = std::max(expect_max, (i * 7919) % 1000);
  EXPECT_EQ(fsum.get()[0], float(n));
  EXPECT_EQ(imax.get()[0], expect_max);
  EXPECT_EQ(count.get()[0], unsigned(n));
}

TEST(CudaEmulator, SyncthreadsCountAndOr) {
  DeviceBuffer<int> out(3);
  FSDP_LAUNCH(syncthreads_count_kernel, dim3(1), dim3(100), 0, nullptr, out.ptr);
  const auto v = out.get();
  EXPECT_EQ(v[0], 20);
  EXPECT_EQ(v[1], 1);
  EXPECT_EQ(v[2], 1);
}

TEST(CudaEmulator, SixteenBitConversionsMatchTheCpuDtypes) {
  std::mt19937 rng(3);
  std::vector<float> in;
  for (float f : {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-5f, 3.0e38f, -INFINITY, 1.00390625f, 1.01171875f})
    in.push_back(f);
  for (int i = 0; i < 3000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) in.push_back(f);
  }
  const int n = int(in.size());
  DeviceBuffer<float> din(in), back(in.size());
  DeviceBuffer<unsigned short> bf(in.size()), hf(in.size());
  FSDP_LAUNCH(convert_kernel, dim3(fsdp::cuda::blocks_for(n, 128)), dim3(128), 0, nullptr, din.ptr, bf.ptr, hf.ptr,
              back.ptr, n);
  const auto b = bf.get(), h = hf.get();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(b[size_t(i)], fsdp::float_to_bf16(in[size_t(i)]).bits) << in[size_t(i)];
    ASSERT_EQ(h[size_t(i)], fsdp::float_to_f16(in[size_t(i)]).bits) << in[size_t(i)];
  }
}

// __fmul_rn / __fadd_rn round each operation (what bitsandbytes-exact NF4 needs): on values
// whose product is inexact, the separate result differs from the fused one, and equals the
// host's two roundings. GCC would contract a plain a * b + c into that fma.
TEST(CudaEmulator, RoundedMultiplyAndAddAreNotFused) {
  const std::vector<float> a = {1.0f + 0x1p-12f, 3.0f, 1.1f}, b = {1.0f + 0x1p-12f, 1.0f / 3.0f, 0.7f},
                           c = {-1.0f, -1.0f, -0.77f};
  DeviceBuffer<float> da(a), db(b), dc(c), separate(3), fused(3);
  FSDP_LAUNCH(rounded_ops_kernel, dim3(1), dim3(3), 0, nullptr, da.ptr, db.ptr, dc.ptr, separate.ptr, fused.ptr);
  const auto s = separate.get(), f = fused.get();
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    volatile float product = a[i] * b[i];  // volatile: rounded here, never contracted
    EXPECT_EQ(s[i], product + c[i]) << i;
    EXPECT_EQ(f[i], std::fma(a[i], b[i], c[i])) << i;
    differ += s[i] != f[i];
  }
  EXPECT_GT(differ, 0);
}

TEST(CudaEmulator, LaunchLimitsAreEnforced) {
  DeviceBuffer<float> p(4096);
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(32, 33), 0, nullptr, p.ptr, 1); },
               {"write_kernel", "1056 threads per block", "cudaErrorInvalidConfiguration"}, {"test_emulator.cpp"});
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(1025), 0, nullptr, p.ptr, 1); }, {"blockDim (1025,1,1)"});
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(8, 8, 65), 0, nullptr, p.ptr, 1); },
               {"blockDim (8,8,65)"});
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1, 65536), dim3(32), 0, nullptr, p.ptr, 1); },
               {"gridDim (1,65536,1)"});
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(0), dim3(32), 0, nullptr, p.ptr, 1); }, {"gridDim (0,1,1)"});
  expect_error([&] { FSDP_LAUNCH(dyn_smem_kernel, dim3(1), dim3(32), 48 * 1024 + 4, nullptr, p.ptr); },
               {"dyn_smem_kernel", "49156 bytes of dynamic shared memory", "cudaFuncSetAttribute"});
  // Opting in raises the limit to what the attribute says, and no further than the device allows.
  FSDP_CUDA_CHECK(cudaFuncSetAttribute(dyn_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
  FSDP_LAUNCH(dyn_smem_kernel, dim3(1), dim3(32), 100 * 1024, nullptr, p.ptr);
  EXPECT_EQ(p.get()[0], 1.0f);
  expect_error([&] { FSDP_LAUNCH(dyn_smem_kernel, dim3(1), dim3(32), 100 * 1024 + 4, nullptr, p.ptr); },
               {"102404 bytes"});
  EXPECT_EQ(cudaFuncSetAttribute(dyn_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // A kernel may not be handed memory the GPU cannot reach.
  std::vector<float> host(16);
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(16), 0, nullptr, host.data(), 16); },
               {"argument 0", "host memory", "cannot dereference"});
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(16), 0, nullptr, p.ptr + 4097, 16); },
               {"argument 0", "cannot dereference"});
}

TEST(CudaEmulator, FaultsAreReportedNotRun) {
  DeviceBuffer<float> p(64);
  DeviceBuffer<int> q(64);
  expect_error([&] { FSDP_LAUNCH(divergent_barrier_kernel, dim3(1), dim3(64), 0, nullptr, p.ptr, 40); },
               {"divergent_barrier_kernel", "block (0,0,0) thread (40,0,0)", "exited while 40 other threads",
                "__syncthreads"});
  expect_error([&] { FSDP_LAUNCH(missing_lane_kernel, dim3(1), dim3(20), 0, nullptr, q.ptr); },
               {"__shfl_xor_sync", "lane 20, which does not exist"});
  expect_error([&] { FSDP_LAUNCH(exited_lane_kernel, dim3(1), dim3(32), 0, nullptr, q.ptr); },
               {"waits for lane 0, which has exited"});
  expect_error([&] { FSDP_LAUNCH(deadlock_kernel, dim3(1), dim3(32), 0, nullptr, q.ptr); },
               {"deadlock", "16 threads at __syncthreads (first: thread (0,0,0))",
                "16 threads at __any_sync(mask 0xffffffff) (first: thread (16,0,0))"});
  expect_error([&] { FSDP_LAUNCH(trap_kernel, dim3(4), dim3(8), 0, nullptr, q.ptr); },
               {"block (1,0,0) thread (3,0,0)", "__trap", "cudaErrorLaunchFailure"});
  // The emulator recovers: the next launch runs normally on the same fibers.
  FSDP_LAUNCH(write_kernel, dim3(1), dim3(64), 0, nullptr, p.ptr, 64);
  for (float v : p.get()) EXPECT_EQ(v, 1.0f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Threads switch only at barriers and collectives, so a missing barrier is visible only
// when the run order puts the reader first: increasing order hides a read of the left
// neighbour, decreasing order exposes it (dynamic shared memory reads back 0xff bytes).
TEST(CudaEmulator, ReverseScheduleExposesAMissingBarrier) {
  DeviceBuffer<int> out(64);
  fsdp_emu::set_schedule(0);
  FSDP_LAUNCH(missing_barrier_kernel, dim3(1), dim3(64), 64 * sizeof(int), nullptr, out.ptr);
  const auto forward = out.get();
  fsdp_emu::set_schedule(1);
  FSDP_LAUNCH(missing_barrier_kernel, dim3(1), dim3(64), 64 * sizeof(int), nullptr, out.ptr);
  const auto reverse = out.get();
  fsdp_emu::set_schedule(-1);
  for (int t = 1; t < 64; ++t) {
    EXPECT_EQ(forward[size_t(t)], t) << "forward order hides the race";
    EXPECT_EQ(reverse[size_t(t)], -1) << "reverse order reads the unwritten neighbour";
  }
}

#if defined(__SANITIZE_ADDRESS__)
TEST(CudaEmulatorDeathTest, OutOfBoundsWriteInAKernelIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceBuffer<float> p(100);
        FSDP_LAUNCH(write_kernel, dim3(1), dim3(128), 0, nullptr, p.ptr, 101);  // bound off by one
      },
      "heap-buffer-overflow(.|\n)*WRITE of size 4");
}

TEST(CudaEmulatorDeathTest, OutOfBoundsSharedMemoryIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceBuffer<float> p(1);
        FSDP_LAUNCH(dyn_smem_kernel, dim3(1), dim3(32), 31 * sizeof(float), nullptr, p.ptr);  // one float short
      },
      "heap-buffer-overflow(.|\n)*WRITE of size 4");
}
#endif

TEST(CudaEmulatorRuntime, CopiesAndFreesAreChecked) {
  DeviceBuffer<float> d(10);
  std::vector<float> h(20);
  expect_error([&] { FSDP_CUDA_CHECK(cudaMemcpy(d.ptr, h.data(), 11 * sizeof(float), cudaMemcpyHostToDevice)); },
               {"cudaMemcpy", "runs past the end of its 40-byte device allocation", "cudaErrorInvalidValue"});
  expect_error([&] { FSDP_CUDA_CHECK(cudaMemcpy(h.data(), d.ptr, 8, cudaMemcpyHostToDevice)); },
               {"HostToDevice", "host memory"});
  expect_error([&] { FSDP_CUDA_CHECK(cudaMemset(h.data(), 0, 8)); }, {"not device memory"});
  void* p = nullptr;
  FSDP_CUDA_CHECK(cudaMalloc(&p, 64));
  expect_error([&] { FSDP_CUDA_CHECK(cudaFree(static_cast<char*>(p) + 8)); }, {"not the start of its allocation"});
  FSDP_CUDA_CHECK(cudaFree(p));
  expect_error([&] { FSDP_CUDA_CHECK(cudaFree(p)); }, {"freed twice?"});
  // Fresh device memory reads as NaN until written.
  DeviceBuffer<float> fresh(3);
  for (float v : fresh.get()) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaEmulatorRuntime, StreamsEventsAndThePool) {
  cudaStream_t s = nullptr;
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemPool_t pool = nullptr;
  FSDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t used0 = 0;
  FSDP_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used0));
  void* p = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(&p, 1000, s));
  uint64_t used = 0;
  FSDP_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT_EQ(used, used0 + 1000);
  cudaEvent_t a, b;
  FSDP_CUDA_CHECK(cudaEventCreate(&a));
  FSDP_CUDA_CHECK(cudaEventCreate(&b));
  FSDP_CUDA_CHECK(cudaEventRecord(a, s));
  FSDP_LAUNCH(write_kernel, dim3(1), dim3(250), 0, s, static_cast<float*>(p), 250);
  FSDP_CUDA_CHECK(cudaEventRecord(b, s));
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(nullptr, b, 0));
  float ms = -1;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT_GE(ms, 0.0f);
  FSDP_CUDA_CHECK(cudaFreeAsync(p, s));
  FSDP_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT_EQ(used, used0);
  FSDP_CUDA_CHECK(cudaEventDestroy(a));
  FSDP_CUDA_CHECK(cudaEventDestroy(b));
  FSDP_CUDA_CHECK(cudaStreamDestroy(s));
  DeviceBuffer<float> q(4);
  expect_error([&] { FSDP_LAUNCH(write_kernel, dim3(1), dim3(4), 0, s, q.ptr, 4); }, {"not a live stream"});
  expect_error([&] { FSDP_CUDA_CHECK(cudaSetDevice(99)); }, {"cudaErrorInvalidDevice", "FSDP_EMU_DEVICE_COUNT"});
}

// Note [Deferred copies]: an asynchronous copy on a created stream runs only when CUDA's
// ordering requires it, so a reader that forgot the event or the synchronisation sees the
// old data here, as it could on a GPU.
TEST(CudaEmulatorRuntime, AsyncCopiesOnAStreamWaitForWhatOrdersThem) {
  constexpr int n = 64;
  cudaStream_t copies = nullptr, compute = nullptr;
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking));
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  float* pinned = nullptr;
  FSDP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)));
  DeviceBuffer<float> dev(n), out(n);
  for (int i = 0; i < n; ++i) pinned[i] = float(i);
  cudaEvent_t uploaded = nullptr;
  FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));

  // Host -> device on `copies`; a kernel on `compute` that does not wait reads the old data.
  FSDP_CUDA_CHECK(cudaMemcpyAsync(dev.ptr, pinned, n * sizeof(float), cudaMemcpyHostToDevice, copies));
  FSDP_CUDA_CHECK(cudaEventRecord(uploaded, copies));
  FSDP_LAUNCH(copy_kernel, dim3(1), dim3(n), 0, compute, dev.ptr, out.ptr, n);
  for (float v : out.get()) EXPECT_TRUE(std::isnan(v)) << "a kernel saw a copy it did not wait for";
  // Waiting for the event orders the copy first.
  FSDP_CUDA_CHECK(cudaStreamWaitEvent(compute, uploaded, 0));
  FSDP_LAUNCH(copy_kernel, dim3(1), dim3(n), 0, compute, dev.ptr, out.ptr, n);
  std::vector<float> got = out.get();
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[size_t(i)], float(i));

  // Device -> pinned host: the host sees the bytes only after synchronising.
  std::vector<float> twice(n);
  for (int i = 0; i < n; ++i) twice[size_t(i)] = 2.0f * float(i);
  FSDP_CUDA_CHECK(cudaMemcpy(dev.ptr, twice.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  FSDP_CUDA_CHECK(cudaMemcpyAsync(pinned, dev.ptr, n * sizeof(float), cudaMemcpyDeviceToHost, copies));
  EXPECT_EQ(pinned[3], 3.0f) << "the host read a copy before synchronising";
  FSDP_CUDA_CHECK(cudaStreamSynchronize(copies));
  EXPECT_EQ(pinned[3], 6.0f);

  // An event stands for the copies before it, not those after.
  cudaEvent_t first = nullptr;
  FSDP_CUDA_CHECK(cudaEventCreate(&first));
  for (int i = 0; i < n; ++i) pinned[i] = -1.0f;
  FSDP_CUDA_CHECK(cudaMemcpyAsync(pinned, dev.ptr, 8 * sizeof(float), cudaMemcpyDeviceToHost, copies));
  FSDP_CUDA_CHECK(cudaEventRecord(first, copies));
  FSDP_CUDA_CHECK(cudaMemcpyAsync(pinned + 8, dev.ptr + 8, 8 * sizeof(float), cudaMemcpyDeviceToHost, copies));
  FSDP_CUDA_CHECK(cudaEventSynchronize(first));
  EXPECT_EQ(pinned[7], 14.0f);
  EXPECT_EQ(pinned[8], -1.0f);
  // Work enqueued on the same stream runs after its queued copies (streams run in order).
  FSDP_LAUNCH(write_kernel, dim3(1), dim3(n), 0, copies, out.ptr, n);
  EXPECT_EQ(pinned[8], 16.0f);

  // Freeing memory a queued copy still reads runs the copy first (no use after free).
  float* scratch = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), n * sizeof(float), compute));
  FSDP_CUDA_CHECK(cudaMemcpyAsync(scratch, dev.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice, compute));
  FSDP_CUDA_CHECK(cudaMemcpyAsync(pinned, scratch, n * sizeof(float), cudaMemcpyDeviceToHost, copies));
  FSDP_CUDA_CHECK(cudaFreeAsync(scratch, compute));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(copies));
  FSDP_CUDA_CHECK(cudaFreeHost(pinned));
  FSDP_CUDA_CHECK(cudaEventDestroy(first));
  FSDP_CUDA_CHECK(cudaEventDestroy(uploaded));
  FSDP_CUDA_CHECK(cudaStreamDestroy(copies));
  FSDP_CUDA_CHECK(cudaStreamDestroy(compute));
}

// The WMMA stand-in against a host GEMM: small integers, so float sums are exact and the
// results must be equal, in every combination of fragment and memory layouts.
template <typename T, typename LA, typename LB>
void check_wmma_gemm(wmma::layout_t out_layout) {
  constexpr bool a_row = std::is_same_v<LA, wmma::row_major>, b_row = std::is_same_v<LB, wmma::row_major>;
  const int M = kGemmM, N = kGemmN, K = kGemmK;
  const int lda = (a_row ? K : M) + 8, ldb = (b_row ? N : K) + 16, ldc = N + 4;
  const int ldo = (out_layout == wmma::mem_row_major ? N : M) + 4;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> A(size_t(M * K)), B(size_t(K * N)), C(size_t(M * ldc));
  std::vector<T> a(size_t(lda * (a_row ? M : K)), T(0.0f)), b(size_t(ldb * (b_row ? K : N)), T(0.0f));
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) {
      A[size_t(i * K + k)] = float(small(rng));
      a[size_t(a_row ? i * lda + k : k * lda + i)] = T(A[size_t(i * K + k)]);
    }
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) {
      B[size_t(k * N + j)] = float(small(rng));
      b[size_t(b_row ? k * ldb + j : j * ldb + k)] = T(B[size_t(k * N + j)]);
    }
  for (float& v : C) v = float(small(rng));
  DeviceBuffer<T> da(a), db(b);
  DeviceBuffer<float> dc(C), dout{size_t(ldo * (out_layout == wmma::mem_row_major ? M : N))};
  FSDP_LAUNCH((wmma_gemm_kernel<T, LA, LB>), dim3(1), dim3(32 * (M / 16) * (N / 16)), 0, nullptr, da.ptr, lda, db.ptr,
              ldb, dc.ptr, ldc, dout.ptr, ldo, out_layout);
  const auto out = dout.get();
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float want = C[size_t(i * ldc + j)];
      for (int k = 0; k < K; ++k) want += A[size_t(i * K + k)] * B[size_t(k * N + j)];
      const size_t o = size_t(out_layout == wmma::mem_row_major ? i * ldo + j : j * ldo + i);
      ASSERT_EQ(out[o], want / 2) << i << " " << j << " a_row " << a_row << " b_row " << b_row;
    }
}

TEST(CudaEmulatorWmma, GemmMatchesTheHostInEveryLayout) {
  using R = wmma::row_major;
  using C = wmma::col_major;
  check_wmma_gemm<__nv_bfloat16, R, R>(wmma::mem_row_major);
  check_wmma_gemm<__nv_bfloat16, R, C>(wmma::mem_col_major);
  check_wmma_gemm<__nv_bfloat16, C, R>(wmma::mem_row_major);
  check_wmma_gemm<__nv_bfloat16, C, C>(wmma::mem_col_major);
  check_wmma_gemm<__half, R, C>(wmma::mem_row_major);
  check_wmma_gemm<__half, C, R>(wmma::mem_col_major);
}

TEST(CudaEmulatorWmma, MisuseFailsTheLaunch) {
  DeviceBuffer<__nv_bfloat16> a(64 * 64);
  DeviceBuffer<float> f(64 * 64);
  const auto run = [&](int mode, int threads) {
    FSDP_LAUNCH(wmma_misuse_kernel, dim3(1), dim3(threads), 0, nullptr, a.ptr, f.ptr, mode);
  };
  expect_error([&] { run(0, 32); }, {"cudaErrorMisalignedAddress", "wmma::load_matrix_sync", "not 256-bit"});
  expect_error([&] { run(1, 32); }, {"cudaErrorMisalignedAddress", "ldm 12 is not a multiple of 8 elements"});
  expect_error([&] { run(2, 32); }, {"wmma::load_matrix_sync with mask 0xffffffff waits for lane 16, which has exited"});
  expect_error([&] { run(3, 64); }, {"differ between lanes", "lane 0 (mptr", "lane 16 (mptr"});
  expect_error([&] { run(4, 32); }, {"different wmma operations", "wmma::load_matrix_sync", "wmma::store_matrix_sync"});
  expect_error([&] { run(5, 32); }, {"ldm 6 is not a multiple of 4 elements"});
  expect_error([&] { run(6, 48); }, {"names lane 16, which does not exist"});  // the second warp has 16 lanes
  run(6, 64);  // whole warps: the same call is valid, and the emulator has recovered
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A warp executes its wmma operation as soon as its lanes are there and runs on: with warp
// 0 scheduled first, its load comes before warp 1's stores unless a barrier orders them
// (unwritten dynamic shared memory reads back as NaN). Completing the load only after
// every thread had run would read 1s and hide the missing barrier.
TEST(CudaEmulatorWmma, AWarpRunsAheadToExposeAMissingBarrier) {
  DeviceBuffer<float> out(256);
  fsdp_emu::set_schedule(0);
  for (int with_barrier : {0, 1}) {
    FSDP_LAUNCH(wmma_after_plain_stores_kernel, dim3(1), dim3(64), 256 * sizeof(float) + 32, nullptr, out.ptr,
                with_barrier);
    for (float v : out.get()) {
      if (with_barrier) ASSERT_EQ(v, 1.0f);
      else ASSERT_TRUE(std::isnan(v)) << "the load ran after the stores it does not wait for";
    }
  }
  fsdp_emu::set_schedule(-1);
}

// The cuBLASLt stand-in: a batched, transposed, strided GEMM computed as documented, and
// misuse refused with the library's status and the emulator's reason.
TEST(CudaEmulatorCublasLt, BatchedStridedGemmAndMisuse) {
  // D[b] = op(A[b]) @ B[b], column-major: A stored 3x2 (op T -> 2x3), B 3x4 with ld 5, 2 batches.
  const int m = 2, n = 4, k = 3, lda = 3, ldb = 5, ldd = 2, batch = 2;
  std::vector<float> a(size_t(lda * m * batch)), b(size_t(ldb * n * batch));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2;
  DeviceBuffer<float> da(a), db(b), dd{size_t(ldd * n * batch)};
  cublasLtHandle_t h = nullptr;
  FSDP_CUBLAS_CHECK(cublasLtCreate(&h));
  cublasLtMatmulDesc_t desc = nullptr;
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t t = CUBLAS_OP_T;
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  cublasLtMatrixLayout_t la, lb, ld;
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, lda));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, ldb));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd));
  const int64_t sa = lda * m, sb = ldb * n, sd = ldd * n;
  for (auto [l, stride] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{ld, sd}}) {
    FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, 8));
  }
  const float one = 1.0f, zero = 0.0f;
  FSDP_CUBLAS_CHECK(cublasLtMatmul(h, desc, &one, da.ptr, la, db.ptr, lb, &zero, dd.ptr, ld, dd.ptr, ld, nullptr,
                                   nullptr, 0, nullptr));
  const auto d = dd.get();
  for (int bt = 0; bt < batch; ++bt)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float want = 0;
        for (int p = 0; p < k; ++p) want += a[size_t(bt * sa + p + i * lda)] * b[size_t(bt * sb + p + j * ldb)];
        EXPECT_EQ(d[size_t(bt * sd + i + j * ldd)], want) << bt << " " << i << " " << j;
      }
  // B's last batch runs past its allocation when the batch stride is too large.
  const int64_t too_far = sb + 5;
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &too_far, 8));
  expect_error([&] {
    FSDP_CUBLAS_CHECK(cublasLtMatmul(h, desc, &one, da.ptr, la, db.ptr, lb, &zero, dd.ptr, ld, dd.ptr, ld, nullptr,
                                     nullptr, 0, nullptr));
  }, {"CUBLAS_STATUS_INVALID_VALUE", "B 3x4 (ld 5, batch 2) spans 172 bytes", "beyond device memory"});
  cublasLtMatrixLayout_t bad_ld;
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bad_ld, CUDA_R_32F, m, n, 1));
  expect_error([&] {
    FSDP_CUBLAS_CHECK(cublasLtMatmul(h, desc, &one, da.ptr, la, db.ptr, lb, &zero, dd.ptr, bad_ld, dd.ptr, bad_ld,
                                     nullptr, nullptr, 0, nullptr));
  }, {"leading dimension 1 < rows 2"});
  for (auto l : {la, lb, ld, bad_ld}) FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
  FSDP_CUBLAS_CHECK(cublasLtDestroy(h));
}

}  // namespace
