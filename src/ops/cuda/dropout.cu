// Dropout's mask on the GPU, the CPU's rule bit for bit (src/ops/cpu/dropout.cpp,
// fsdp/ops/dropout.h): keep(i, j) = splitmix64(mix_key(mix_key(key, row0 + i), col0 + j)) >> 11
// >= threshold, the same 64-bit integer arithmetic as fsdp/core/random.h. Kept values are
// multiplied by the scale in the compute type (float; double for float64) and the product
// rounded before any accumulating add (no FMA), so CUDA and the CPU give the same bits for
// float32 and float64, and bf16/fp16 round the result once more.
//
// Layout: a 2-D grid, x over columns, y over rows (grid-stride past 65535); no thread reads
// what another writes, so dst may alias src.
#include "common.cuh"
#include "dropout.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ uint64_t mix_key(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b + 0x632be59bd9b4e019ull));
}

// The product rounded on its own (nvcc would fuse it into the accumulating add; the CPU
// rounds it alone too).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__global__ void dropout_kernel(RowsView src, RowsView dst, int64_t n, int64_t c, uint64_t key, int64_t row0,
                               int64_t col0, uint64_t threshold, double scale, bool accumulate) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const A s = A(scale);
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const bool keep = (splitmix64(mix_key(mix_key(key, uint64_t(row0 + i)), uint64_t(col0 + j))) >> 11) >= threshold;
    const A v = keep ? mul_rn(E::load(static_cast<const T*>(src.data)[i * src.stride + j]), s) : A(0);
    T* d = static_cast<T*>(dst.data) + i * dst.stride + j;
    *d = E::store(accumulate ? E::load(*d) + v : v);
  }
}

template <typename T>
void dropout_t(RowsView src, RowsView dst, int64_t n, int64_t c, uint64_t key, int64_t row0, int64_t col0,
               uint64_t threshold, double scale, bool accumulate, cudaStream_t s) {
  const dim3 grid(blocks_for(c, kThreads), unsigned(n < 65535 ? n : 65535));
  FSDP_LAUNCH(dropout_kernel<T>, grid, kThreads, 0, s, src, dst, n, c, key, row0, col0, threshold, scale,
              accumulate);
}

}  // namespace

bool dropout_supports(DType t) { return is_floating(t); }

void launch_dropout(DType t, RowsView src, RowsView dst, int64_t n, int64_t c, uint64_t key, int64_t row0,
                    int64_t col0, uint64_t threshold, double scale, bool accumulate, cudaStream_t stream) {
  with_element_type(t, [&](auto e) {
    dropout_t<decltype(e)>(src, dst, n, c, key, row0, col0, threshold, scale, accumulate, stream);
  });
}

}  // namespace fsdp::cuda
