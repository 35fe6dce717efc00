// Decode-time attention against a KV cache (the CPU's math, src/ops/cpu/attention_decode.cpp;
// shapes in include/fsdp/ops/attention_decode.h):
//
//   1. append: k_cache[b, g, pos + t] = k_new[b, t, g], likewise v   (a copying kernel)
//   2. attend: query row t of head h (absolute position pos + t) against cached keys
//      j <= pos + t of kv head g = h / (H / KVH), softmax scale 1/sqrt(D).
//
// A prefill (T >= kDecodeTiledRows) runs step 2 as attention.cu's tiled flash forward with
// the cache as k and v and the queries placed at pos (no lse). A decode step (T small,
// usually 1) runs one block per (h, t, b) query row instead, where a query tile would be
// nearly all padding: per tile of 128 keys, thread c scores key j0 + c (q in shared memory,
// the key row read whole), block_max / block_sum (fixed trees) give the tile's max and sum,
// and thread d then accumulates out[d] = out[d] * exp(m - m') + sum_c p_c V[j0 + c][d]
// (coalesced over d), online as in the flash forward. Every sum runs in an order fixed by
// the shapes, so the bits are the same on every run.
//
// Not yet done for speed: splitting a long cache over several blocks (flash-decoding) when
// B * H blocks do not fill the GPU, and sharing each K/V read among the G query heads of a
// kv head.
#include "attention_decode.cuh"
#include "common.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kColsPerThread = int(kAttentionMaxHeadDim) / kThreads;

template <typename T>
using Acc = typename Elem<T>::acc;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

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

template <typename T>
__global__ void __launch_bounds__(kThreads) attention_decode_row_kernel(DecodeArgs a) {
  using A = Acc<T>;
  __shared__ A s_q[kAttentionMaxHeadDim];
  __shared__ A s_p[kThreads];
  __shared__ A s_max[32];
  __shared__ A s_sum[32];
  const int tid = int(threadIdx.x), D = int(a.D);
  const int64_t h = blockIdx.x, t = blockIdx.y, b = blockIdx.z, g = h / (a.H / a.KVH);
  const int64_t n = a.pos + t + 1;  // keys visible to this row
  const A scale = A(1.0 / sqrt(double(a.D)));
  const T* q = at<T>(a.q, b, t, h);
  for (int d = tid; d < D; d += kThreads) s_q[d] = Elem<T>::load(q[d]);
  __syncthreads();
  const T* K = at<T>(a.k_cache, b, 0, g);
  const T* V = at<T>(a.v_cache, b, 0, g);

  A m = -INFINITY, l = A(0);
  A o[kColsPerThread] = {};
  for (int64_t j0 = 0; j0 < n; j0 += kThreads) {
    const int64_t j = j0 + tid;
    A s = -INFINITY;
    if (j < n) {
      const T* kr = K + j * a.k_cache.st;
      A acc = A(0);
      for (int d = 0; d < D; ++d) acc += s_q[d] * Elem<T>::load(kr[d]);
      s = scale * acc;
    }
    const A tmax = block_max(s, s_max, A(-INFINITY));
    const A m_new = tmax > m ? tmax : m;  // finite: key 0 is in the first tile
    const A alpha = exp_of(m - m_new);
    const A p = j < n ? exp_of(s - m_new) : A(0);
    s_p[tid] = p;
    l = l * alpha + block_sum(p, s_sum);  // (its barrier also publishes s_p)
    m = m_new;
    const int64_t rows = n - j0 < kThreads ? n - j0 : kThreads;
    for (int i = 0; i < kColsPerThread; ++i) {
      const int d = tid + kThreads * i;
      if (d >= D) break;
      A acc = o[i] * alpha;
      for (int64_t c = 0; c < rows; ++c) acc += s_p[c] * Elem<T>::load(V[(j0 + c) * a.v_cache.st + d]);
      o[i] = acc;
    }
    __syncthreads();  // s_p, s_max and s_sum are rewritten by the next tile
  }
  const A inv_l = A(1) / l;
  T* out = at<T>(a.out, b, t, h);
  for (int i = 0; i < kColsPerThread; ++i) {
    const int d = tid + kThreads * i;
    if (d < D) out[d] = Elem<T>::store(o[i] * inv_l);
  }
}

template <typename T>
void decode_t(const DecodeArgs& a, cudaStream_t s) {
  FSDP_LAUNCH(attention_decode_append_kernel<T>, grid_for(a.B * a.T * a.KVH * a.D, kThreads), kThreads, 0, s, a);
  if (a.T >= kDecodeTiledRows) {
    const AttentionFwdArgs f{a.q, a.k_cache, a.v_cache, a.out, nullptr, a.B, a.T, a.H, a.KVH, a.D, a.pos};
    return launch_attention_forward(dtype_of<T>, f, s);
  }
  FSDP_LAUNCH(attention_decode_row_kernel<T>, dim3(unsigned(a.H), unsigned(a.T), unsigned(a.B)), kThreads, 0, s, a);
}

}  // namespace

void launch_attention_decode(DType t, const DecodeArgs& a, cudaStream_t stream) {
  if (t == DType::F32) return decode_t<float>(a, stream);
  if (t == DType::F64) return decode_t<double>(a, stream);
  if (t == DType::BF16) return decode_t<bf16>(a, stream);
}

}  // namespace fsdp::cuda
