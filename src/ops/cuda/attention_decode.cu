// Decode-time attention against a KV cache (the CPU's math, src/ops/cpu/attention_decode.cpp;
// shapes in include/fsdp/ops/attention_decode.h):
//
//   1. append: k_cache[b, g, pos + t] = k_new[b, t, g], likewise v   (a copying kernel)
//   2. attend: query row t of head h (absolute position pos + t) against cached keys
//      j <= pos + t of kv head g = h / (H / KVH), softmax scale 1/sqrt(D).
//
// A prefill (T >= kDecodeTiledRows) runs step 2 as attention.cu's tiled flash forward with
// the cache as k and v and the queries placed at pos (no lse). A decode step (T small,
// usually 1) has too few query rows for a query tile, so it runs flash-decoding instead:
//   * the cache is cut into chunks of kChunk positions, and one block per (chunk, h, b*T+t)
//     runs the online softmax over its chunk's visible keys, 32 keys at a time: the key
//     tile is staged through shared memory (coalesced loads), 4 threads score each key
//     (two xor shuffles join them), and thread d accumulates
//     o[d] = o[d] * exp(m - m') + sum_c p_c V[j0 + c][d]  (coalesced over d);
//   * with one chunk the block writes out = o / l itself; with more, it writes its (m, l, o)
//     to a scratch buffer and a combine kernel, one block per row, merges the chunks in
//     chunk order: M = max m_s, out = sum_s o_s exp(m_s - M) / sum_s l_s exp(m_s - M).
// Chunks are fixed by the positions alone, and every sum runs in a fixed order, so the
// bits are the same on every run (no atomics).
//
// Not yet done for speed: sharing each K/V read among the G query heads of a kv head.
#include "attention_decode.cuh"
#include "common.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kColsPerThread = int(kAttentionMaxHeadDim) / kThreads;
constexpr int kKeys = 32;            // keys per shared-memory tile of the step kernel
constexpr int64_t kChunk = 512;      // cache positions per block of the step kernel

template <typename T>
using Acc = typename Elem<T>::acc;

template <typename T>
__device__ __forceinline__ T* at(const HeadsView& v, int64_t b, int64_t t, int64_t h) {
  return static_cast<T*>(v.data) + b * v.s0 + t * v.st + h * v.sh;
}

// One thread per element of the B * T * KVH new rows, for k and v.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_decode_append_kernel(DecodeArgs a) {
  const int64_t n = a.B * a.T * a.KVH * a.D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % a.D, row = i / a.D, g = row % a.KVH, t = row / a.KVH % a.T, b = row / (a.KVH * a.T);
    at<T>(a.k_cache, b, a.pos + t, g)[d] = at<T>(a.k_new, b, t, g)[d];
    at<T>(a.v_cache, b, a.pos + t, g)[d] = at<T>(a.v_new, b, t, g)[d];
  }
}

// Partial results of the chunks of one query row: m, l and o[D] per chunk.
template <typename A>
struct Partials {
  A* ml;  // [rows, chunks, 2]
  A* o;   // [rows, chunks, D]
};

template <typename T>
__global__ void __launch_bounds__(kThreads) attention_decode_step_kernel(DecodeArgs a, Partials<Acc<T>> part) {
  using A = Acc<T>;
  constexpr int kKeyLanes = kThreads / kKeys;  // threads scoring one key
  __shared__ A s_q[kAttentionMaxHeadDim];
  __shared__ A s_s[kKeys];  // scores, then probabilities
  FSDP_DYNAMIC_SHARED(A, s_k);  // [kKeys][D + 1]
  const int tid = int(threadIdx.x), D = int(a.D), ld = D + 1;
  const int64_t chunk = blockIdx.x, h = blockIdx.y, t = int64_t(blockIdx.z) % a.T, b = int64_t(blockIdx.z) / a.T;
  const int64_t g = h / (a.H / a.KVH), row = (b * a.T + t) * a.H + h;
  const int64_t n = a.pos + t + 1;  // keys visible to this row
  const int64_t c0 = chunk * kChunk, c1 = c0 + kChunk < n ? c0 + kChunk : n;  // c0 >= c1: nothing to see
  const A scale = A(1.0 / sqrt(double(a.D)));
  const T* q = at<T>(a.q, b, t, h);
  for (int d = tid; d < D; d += kThreads) s_q[d] = Elem<T>::load(q[d]);
  const T* K = at<T>(a.k_cache, b, 0, g);
  const T* V = at<T>(a.v_cache, b, 0, g);
  const int key = tid / kKeyLanes, lane = tid % kKeyLanes;

  A m = -INFINITY, l = A(0);  // the same in every thread
  A o[kColsPerThread] = {};
  for (int64_t j0 = c0; j0 < c1; j0 += kKeys) {
    const int64_t rows = c1 - j0 < kKeys ? c1 - j0 : kKeys;
    for (int i = tid; i < rows * D; i += kThreads) {
      const int r = i / D, d = i - r * D;
      s_k[r * ld + d] = Elem<T>::load(K[(j0 + r) * a.k_cache.st + d]);
    }
    __syncthreads();  // (also publishes s_q on the first tile)
    A acc = A(0);
    if (key < rows)
      for (int d = lane; d < D; d += kKeyLanes) acc += s_q[d] * s_k[key * ld + d];
    for (int off = kKeyLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(kFullMask, acc, off);
    if (lane == 0) s_s[key] = key < rows ? scale * acc : A(-INFINITY);
    __syncthreads();
    A tmax = -INFINITY;
    for (int c = 0; c < rows; ++c) tmax = s_s[c] > tmax ? s_s[c] : tmax;
    const A m_new = tmax > m ? tmax : m;  // finite: rows >= 1
    const A alpha = exp_of(m - m_new);
    __syncthreads();  // every thread has read the scores
    if (tid < kKeys) s_s[tid] = tid < rows ? exp_of(s_s[tid] - m_new) : A(0);
    __syncthreads();
    A sum = A(0);
    for (int c = 0; c < rows; ++c) sum += s_s[c];
    l = l * alpha + sum;
    m = m_new;
    for (int i = 0; i < kColsPerThread; ++i) {
      const int d = tid + kThreads * i;
      if (d >= D) break;
      A v = o[i] * alpha;
      for (int c = 0; c < rows; ++c) v += s_s[c] * Elem<T>::load(V[(j0 + c) * a.v_cache.st + d]);
      o[i] = v;
    }
    __syncthreads();  // s_k and s_s are rewritten by the next tile
  }
  if (gridDim.x == 1) {  // one chunk: the row's result
    const A inv_l = A(1) / l;
    T* out = at<T>(a.out, b, t, h);
    for (int i = 0; i < kColsPerThread; ++i) {
      const int d = tid + kThreads * i;
      if (d < D) out[d] = Elem<T>::store(o[i] * inv_l);
    }
    return;
  }
  const int64_t slot = row * gridDim.x + chunk;  // an empty chunk leaves m = -inf, l = 0, o = 0
  if (tid == 0) {
    part.ml[2 * slot] = m;
    part.ml[2 * slot + 1] = l;
  }
  for (int i = 0; i < kColsPerThread; ++i) {
    const int d = tid + kThreads * i;
    if (d < D) part.o[slot * D + d] = o[i];
  }
}

// One block per query row: merges its chunks' partials in chunk order.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_decode_combine_kernel(DecodeArgs a, Partials<Acc<T>> part,
                                                                            int64_t chunks) {
  using A = Acc<T>;
  const int64_t h = blockIdx.x, t = int64_t(blockIdx.y) % a.T, b = int64_t(blockIdx.y) / a.T;
  const int64_t row = (b * a.T + t) * a.H + h;
  const A* ml = part.ml + 2 * row * chunks;
  A M = -INFINITY;
  for (int64_t s = 0; s < chunks; ++s) M = ml[2 * s] > M ? ml[2 * s] : M;
  A L = A(0);
  for (int64_t s = 0; s < chunks; ++s) L += ml[2 * s + 1] * exp_of(ml[2 * s] - M);  // empty: 0 * exp(-inf) = 0
  const A inv_l = A(1) / L;
  T* out = at<T>(a.out, b, t, h);
  for (int64_t d = threadIdx.x; d < a.D; d += kThreads) {
    A acc = A(0);
    for (int64_t s = 0; s < chunks; ++s) acc += part.o[(row * chunks + s) * a.D + d] * exp_of(ml[2 * s] - M);
    out[d] = Elem<T>::store(acc * inv_l);
  }
}

template <typename T>
void decode_t(const DecodeArgs& a, cudaStream_t s) {
  FSDP_LAUNCH(attention_decode_append_kernel<T>, grid_for(a.B * a.T * a.KVH * a.D, kThreads), kThreads, 0, s, a);
  if (a.T >= kDecodeTiledRows) {
    const AttentionFwdArgs f{a.q, a.k_cache, a.v_cache, a.out, nullptr, a.B, a.T, a.H, a.KVH, a.D, a.pos};
    return launch_attention_forward(dtype_of<T>, f, s);
  }
  using A = Acc<T>;
  const int64_t chunks = (a.pos + a.T + kChunk - 1) / kChunk, rows = a.B * a.T * a.H;
  Partials<A> part{nullptr, nullptr};
  if (chunks > 1) {
    FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&part.ml), size_t(rows * chunks * 2) * sizeof(A), s));
    FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&part.o), size_t(rows * chunks * a.D) * sizeof(A), s));
  }
  const size_t smem = size_t(kKeys * (a.D + 1)) * sizeof(A);  // past 48 KiB only for float64 with D > 191
  FSDP_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_step_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)));
  FSDP_LAUNCH(attention_decode_step_kernel<T>, dim3(unsigned(chunks), unsigned(a.H), unsigned(a.B * a.T)), kThreads,
              smem, s, a, part);
  if (chunks > 1) {
    FSDP_LAUNCH(attention_decode_combine_kernel<T>, dim3(unsigned(a.H), unsigned(a.B * a.T)), kThreads, 0, s, a, part,
                chunks);
    FSDP_CUDA_CHECK(cudaFreeAsync(part.ml, s));
    FSDP_CUDA_CHECK(cudaFreeAsync(part.o, s));
  }
}

}  // namespace

void launch_attention_decode(DType t, const DecodeArgs& a, cudaStream_t stream) {
  if (t == DType::F32) return decode_t<float>(a, stream);
  if (t == DType::F64) return decode_t<double>(a, stream);
  if (t == DType::BF16) return decode_t<bf16>(a, stream);
  if (t == DType::F16) return decode_t<f16>(a, stream);
}

}  // namespace fsdp::cuda
