// Device helpers of the attention kernels, shared by the FMA kernels (attention.cu) and
// the tensor-core kernels (attention_tc.cu): the block size, addressing a HeadsView, and
// loading tiles of rows into shared memory, converted to the accumulation type or kept as
// the 16-bit WMMA type. Include from those two .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "attention.cuh"
#include "common.cuh"

namespace fsdp::cuda::attn {

constexpr int kThreads = 256;
template <typename T>
using Acc = typename Elem<T>::acc;

template <typename T>
__device__ __forceinline__ const T* head_row(const HeadsView& v, int64_t b, int64_t t, int64_t h) {
  return static_cast<const T*>(v.data) + b * v.s0 + t * v.st + h * v.sh;
}
template <typename T>
__device__ __forceinline__ T* head_row_mut(const HeadsView& v, int64_t b, int64_t t, int64_t h) {
  return static_cast<T*>(v.data) + b * v.s0 + t * v.st + h * v.sh;
}

// The 16-bit WMMA element type of bf16 / f16, which the tensor-core kernels' tiles hold.
template <typename T>
struct MmaElem;
template <>
struct MmaElem<bf16> {
  using type = __nv_bfloat16;
  __device__ static type from_bits(bf16 v) { return __ushort_as_bfloat16(v.bits); }
  __device__ static type round(float f) { return __float2bfloat16_rn(f); }
};
template <>
struct MmaElem<f16> {
  using type = __half;
  __device__ static type from_bits(f16 v) { return __ushort_as_half(v.bits); }
  __device__ static type round(float f) { return __float2half_rn(f); }
};

// Note [Document masking] (fsdp/ops/attention.h) in the kernels: query row t of row b sees
// keys doc_lo(..., t) <= j <= t. A query tile starting at i0 needs no key before its first
// row's document start, so its key loop starts at the tile holding doc_lo(i0) (tiles stay
// aligned as without documents), and a key tile's query loop ends at the first query tile
// whose first row's document starts after the key tile's last key (doc_start never
// decreases along a row). Only tiles straddling a boundary are masked element by element.
__device__ __forceinline__ int64_t doc_lo(const int32_t* doc_start, int64_t T, int64_t b, int64_t t) {
  return doc_start != nullptr ? int64_t(doc_start[b * T + t]) : 0;
}
// The first key tile (of kTile rows) a query tile starting at i0 visits.
template <int kTile>
__device__ __forceinline__ int64_t first_key_tile(const int32_t* doc_start, int64_t T, int64_t b, int64_t i0) {
  return doc_lo(doc_start, T, b, i0) / kTile * kTile;
}
// Whether the query tile at i0 sees any key before `key_end` (exclusive).
__device__ __forceinline__ bool sees_keys_before(const int32_t* doc_start, int64_t T, int64_t b, int64_t i0,
                                                 int64_t key_end) {
  return doc_lo(doc_start, T, b, i0) < key_end;
}

// A tile element from an input element: converted to the accumulation type (the FMA
// kernels), or the same 16 bits as the WMMA type (the tensor-core kernels).
template <typename Dst, typename T>
__device__ __forceinline__ Dst tile_value(T v) {
  if constexpr (std::is_same_v<Dst, Acc<T>>) return Elem<T>::load(v);
  else return MmaElem<T>::from_bits(v);
}

// dst[r][d] (row stride ld) = src row r, as Dst, for r < rows; zeros for rows <= r < kTile.
template <typename T, int kTile, typename Dst>
__device__ __forceinline__ void load_tile(Dst* dst, int ld, const T* src, int64_t row_stride, int64_t rows, int D) {
  for (int i = int(threadIdx.x); i < kTile * D; i += kThreads) {
    const int r = i / D, d = i - r * D;
    dst[r * ld + d] = r < rows ? tile_value<Dst>(src[r * row_stride + d]) : Dst(0.0f);
  }
}

// K_j and V_j (kv head g, key rows j0 .. j0 + rows_k) of the forward or backward args.
template <typename T, int kTile, typename Args, typename Dst>
__device__ __forceinline__ void load_kv_tiles(const Args& a, Dst* k, Dst* v, int ld, int64_t b, int64_t j0, int64_t g,
                                              int64_t rows_k, int D) {
  load_tile<T, kTile>(k, ld, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, D);
  load_tile<T, kTile>(v, ld, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, D);
}

// Q_i and dO_i (as Dst, row stride ld), lse_i and delta_i of query rows i0 .. i0 + rows_q.
template <typename T, int kTile, typename Dst>
__device__ __forceinline__ void load_query_rows(const AttentionBwdArgs& a, const Acc<T>* delta, Dst* q, Dst* dout,
                                                int ld, Acc<T>* s_lse, Acc<T>* s_delta, int64_t b, int64_t h,
                                                int64_t i0, int64_t rows_q) {
  const int D = int(a.D);
  load_tile<T, kTile>(q, ld, head_row<T>(a.q, b, i0, h), a.q.st, rows_q, D);
  load_tile<T, kTile>(dout, ld, head_row<T>(a.dout, b, i0, h), a.dout.st, rows_q, D);
  const Stat<T>* lse = static_cast<const Stat<T>*>(a.lse) + (b * a.H + h) * a.T + i0;
  const Acc<T>* dl = delta + (b * a.H + h) * a.T + i0;
  for (int r = int(threadIdx.x); r < kTile; r += kThreads) {
    s_lse[r] = r < rows_q ? lse[r] : Acc<T>(0);
    s_delta[r] = r < rows_q ? dl[r] : Acc<T>(0);
  }
}

// ---- host side ---------------------------------------------------------------------------
inline unsigned tiles(int64_t n, int tile) { return unsigned((n + tile - 1) / tile); }

template <typename K>
void allow_smem(K* kernel, size_t bytes) {
  FSDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// The tensor-core launchers (attention_tc.cu), for t and a.D where attention_uses_tensor_cores
// holds; delta as attention.cu's backward computes it (float32, [B, H, T]).
void launch_attention_forward_tc(DType t, const AttentionFwdArgs& a, cudaStream_t s);
void launch_attention_backward_tc(DType t, const AttentionBwdArgs& a, const float* delta, cudaStream_t s);

}  // namespace fsdp::cuda::attn
