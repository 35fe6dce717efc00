// Causal GQA attention, flash-style, forward and backward (the CPU's math,
// src/ops/cpu/attention.cpp; shapes in include/fsdp/ops/attention.h):
//
//   forward, per (b, h, tile of query rows i), streaming tiles of keys j <= i:
//     S = scale * Q_i K_j^T (masked above the diagonal),  m' = max(m, rowmax S),
//     P = exp(S - m'),  l = l * exp(m - m') + rowsum P,  O = O * exp(m - m') + P V_j
//     out = O / l,  lse = m + log l                  (kv head g = h / (H / KVH))
//   backward, with delta_i = rowsum(dO_i * O_i) from a small kernel first:
//     P = exp(scale * Q_i K_j^T - lse_i),  dP = dO_i V_j^T,  dS = P * (dP - delta_i) * scale
//     dV_j = sum_i P^T dO_i,  dK_j = sum_i dS^T Q_i,  dQ_i = sum_j dS K_j
//
// FMA kernels: every kernel runs 256 threads as a 16 x 16 grid (ty, tx) over kTile x kTile
// tiles: thread (ty, tx) owns rows ty + 16 a and columns tx + 16 b of a score tile and
// rows ty + 16 a, head-dim columns tx + 16 c of an output tile (c < kDPT, D <= 16 kDPT),
// its accumulators in registers. Q/K/V/dO tiles are converted to the accumulation type
// (float; double for float64) as they are loaded into shared memory, rows padded to D + 1
// so the 16 rows a warp reads at one d fall in distinct banks. Rows past the sequence are
// loaded as zeros, so no uninitialised value ever reaches a product. The softmax pass of
// the forward gives each score row kThreads / kTile threads, joined by xor shuffles.
//
// Determinism, without atomics: the backward runs two passes that each recompute P and dS
// (twice the QK^T and dO V^T work of an atomics-based dQ): one block per (key tile, kv
// head, b) sums dK and dV over every query head of its group and every query tile in a
// fixed order, and one block per (query tile, h, b) sums dQ over its key tiles in order.
// Every output element is summed by one thread in an order fixed by the shapes, so two
// runs give the same bits.
//
// Tensor cores: bfloat16 and float16 with D = 64 or 128 (the Llama head dims) run the same
// algorithms on WMMA (nvcuda::wmma, m16n16k16, 16-bit operands, float accumulation, sm_80+;
// the *_tc_kernel kernels): S = Q K^T and O += P V forward; S, dP = dO V^T, dV += P^T dO,
// dK += dS^T Q and dQ += dS K backward, on 64 x 64 tiles with 8 warps. Q, K, V and dO stay
// in their 16-bit type in shared memory (exact); P and dS are rounded to it as operands,
// the one numerical difference from the FMA kernels (test_cuda_attention.cpp states the
// bounds), and l sums the float P, so lse keeps float accuracy. The forward keeps O in
// shared memory as float: the online softmax rescales it by row, and which row a fragment
// element belongs to is unspecified. The backward keeps dK, dV and dQ in fragments (no row
// scaling), every sum in an order fixed by the shapes: still deterministic. float32,
// float64 and other head dims stay on the FP32 (FP64) pipes. In CI the WMMA calls run on
// the emulator's stand-in mma.h, which proves the documented fragment semantics, the
// tiling, masking and warp-uniform use, not the hardware's fragment layout or speed
// (tests/README.md). Next for speed: mma.sync with P kept in registers (FlashAttention-2),
// ldmatrix and cp.async pipelining, wgmma on sm_90.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <atomic>

#include "attention.cuh"
#include "common.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSide = 16;  // the thread grid is kSide x kSide

template <typename T>
using Acc = typename Elem<T>::acc;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

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

// Shared memory of the kernels, in elements of the accumulation type.
constexpr int64_t fwd_smem_elems(int tile, int64_t D) { return 3 * tile * (D + 1) + tile * (tile + 1) + tile; }
constexpr int64_t bwd_smem_elems(int tile, int64_t D) { return 4 * tile * (D + 1) + 2 * tile * (tile + 1) + 2 * tile; }

// ---- forward ----------------------------------------------------------------------------
template <typename T, int kTile, int kDPT>
__global__ void __launch_bounds__(kThreads) attention_fwd_kernel(AttentionFwdArgs a) {
  using A = Acc<T>;
  constexpr int kR = kTile / kSide;               // score rows / columns per thread
  constexpr int kRowLanes = kThreads / kTile;     // threads per row in the softmax pass
  constexpr int kRowCols = kTile / kRowLanes;     // columns each of them reduces
  constexpr int lds = kTile + 1;
  const int D = int(a.D), ld = D + 1;
  FSDP_DYNAMIC_SHARED(A, smem);
  A* sQ = smem;
  A* sK = sQ + kTile * ld;
  A* sV = sK + kTile * ld;
  A* sS = sV + kTile * ld;        // [kTile][lds] scores, then probabilities
  A* sRow = sS + kTile * lds;     // [kTile] the rows' rescale factors, at the end 1 / l
  const int tid = int(threadIdx.x), ty = tid / kSide, tx = tid % kSide;
  const int64_t qt = int64_t(gridDim.x) - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / (a.H / a.KVH);
  const int64_t i0 = qt * kTile;
  const int64_t rows_q = a.T - i0 < kTile ? a.T - i0 : kTile;
  const int64_t nk = a.q_pos + i0 + rows_q;  // keys visible to the block's last row
  const A scale = A(1.0 / sqrt(double(a.D)));

  load_tile<T, kTile>(sQ, ld, head_row<T>(a.q, b, i0, h), a.q.st, rows_q, D);

  // The softmax pass: row sr, threads sp = 0 .. kRowLanes-1 of it (consecutive lanes).
  const int sr = tid / kRowLanes, sp = tid % kRowLanes;
  A m = -INFINITY, l = A(0);  // running max and sum of row sr (the same in each of its lanes)
  A o[kR][kDPT] = {};

  for (int64_t j0 = 0; j0 < nk; j0 += kTile) {
    const int64_t rows_k = nk - j0 < kTile ? nk - j0 : kTile;
    load_tile<T, kTile>(sK, ld, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, D);
    load_tile<T, kTile>(sV, ld, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, D);
    __syncthreads();

    A s[kR][kR] = {};
    for (int d = 0; d < D; ++d) {
      A qv[kR], kv[kR];
      for (int i = 0; i < kR; ++i) qv[i] = sQ[(ty + kSide * i) * ld + d];
      for (int j = 0; j < kR; ++j) kv[j] = sK[(tx + kSide * j) * ld + d];
      for (int i = 0; i < kR; ++i)
        for (int j = 0; j < kR; ++j) s[i][j] += qv[i] * kv[j];
    }
    for (int i = 0; i < kR; ++i)
      for (int j = 0; j < kR; ++j) {
        const int r = ty + kSide * i, c = tx + kSide * j;
        // Rows past T see keys <= their (virtual) position, so every row has key 0.
        const bool visible = j0 + c <= a.q_pos + i0 + r && j0 + c < nk;
        sS[r * lds + c] = visible ? scale * s[i][j] : A(-INFINITY);
      }
    __syncthreads();

    {
      A* row = sS + sr * lds + sp * kRowCols;
      A tmax = -INFINITY;
      for (int c = 0; c < kRowCols; ++c) tmax = row[c] > tmax ? row[c] : tmax;
      for (int off = kRowLanes / 2; off > 0; off >>= 1) {
        const A other = __shfl_xor_sync(kFullMask, tmax, off);
        tmax = other > tmax ? other : tmax;
      }
      const A m_new = tmax > m ? tmax : m;  // finite: key 0 is in the first tile
      const A alpha = exp_of(m - m_new);
      A sum = A(0);
      for (int c = 0; c < kRowCols; ++c) {
        const A p = exp_of(row[c] - m_new);
        row[c] = p;
        sum += p;
      }
      for (int off = kRowLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
      l = l * alpha + sum;
      m = m_new;
      if (sp == 0) sRow[sr] = alpha;
    }
    __syncthreads();

    for (int i = 0; i < kR; ++i) {
      const A alpha = sRow[ty + kSide * i];
      for (int c = 0; c < kDPT; ++c) o[i][c] *= alpha;
    }
    for (int c = 0; c < rows_k; ++c) {  // P is 0 past rows_k: those keys are skipped
      A pv[kR];
      for (int i = 0; i < kR; ++i) pv[i] = sS[(ty + kSide * i) * lds + c];
      for (int dc = 0; dc < kDPT; ++dc) {
        const int d = tx + kSide * dc;
        if (d < D) {
          const A vv = sV[c * ld + d];
          for (int i = 0; i < kR; ++i) o[i][dc] += pv[i] * vv;
        }
      }
    }
    __syncthreads();
  }

  if (sp == 0) {
    sRow[sr] = A(1) / l;
    if (a.lse != nullptr && sr < rows_q) static_cast<A*>(a.lse)[(b * a.H + h) * a.T + i0 + sr] = m + log_of(l);
  }
  __syncthreads();
  for (int i = 0; i < kR; ++i) {
    const int r = ty + kSide * i;
    if (r >= rows_q) continue;
    const A inv_l = sRow[r];
    T* out = head_row_mut<T>(a.out, b, i0 + r, h);
    for (int dc = 0; dc < kDPT; ++dc) {
      const int d = tx + kSide * dc;
      if (d < D) out[d] = Elem<T>::store(o[i][dc] * inv_l);
    }
  }
}

// ---- backward ---------------------------------------------------------------------------
// delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]: a warp per row, rows in
// memory order (b, t, h) so consecutive warps read consecutive rows.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_bwd_delta_kernel(AttentionBwdArgs a, Acc<T>* delta) {
  using A = Acc<T>;
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int64_t rows = a.B * a.T * a.H;
  if (row >= rows) return;  // whole warps leave together
  const int64_t b = row / (a.T * a.H), t = row / a.H % a.T, h = row % a.H;
  const T* dout = head_row<T>(a.dout, b, t, h);
  const T* out = head_row<T>(a.out, b, t, h);
  A acc = A(0);
  for (int64_t d = lane; d < a.D; d += 32) acc += Elem<T>::load(dout[d]) * Elem<T>::load(out[d]);
  acc = warp_sum(acc);
  if (lane == 0) delta[(b * a.H + h) * a.T + t] = acc;
}

// The block's shared tiles: Q_i, dO_i (query rows), K_j, V_j (key rows), P and dS
// [query r][key c], lse_i and delta_i.
template <typename A, int kTile>
struct BwdSmem {
  A *q, *dout, *k, *v, *p, *ds, *lse, *delta;
  __device__ BwdSmem(A* base, int ld) {
    q = base;
    dout = q + kTile * ld;
    k = dout + kTile * ld;
    v = k + kTile * ld;
    p = v + kTile * ld;
    ds = p + kTile * (kTile + 1);
    lse = ds + kTile * (kTile + 1);
    delta = lse + kTile;
  }
};

// Q_i and dO_i (as Dst, row stride ld), lse_i and delta_i of query rows i0 .. i0 + rows_q.
template <typename T, int kTile, typename Dst>
__device__ __forceinline__ void load_query_rows(const AttentionBwdArgs& a, const Acc<T>* delta, Dst* q, Dst* dout,
                                                int ld, Acc<T>* s_lse, Acc<T>* s_delta, int64_t b, int64_t h,
                                                int64_t i0, int64_t rows_q) {
  const int D = int(a.D);
  load_tile<T, kTile>(q, ld, head_row<T>(a.q, b, i0, h), a.q.st, rows_q, D);
  load_tile<T, kTile>(dout, ld, head_row<T>(a.dout, b, i0, h), a.dout.st, rows_q, D);
  const Acc<T>* lse = static_cast<const Acc<T>*>(a.lse) + (b * a.H + h) * a.T + i0;
  const Acc<T>* dl = delta + (b * a.H + h) * a.T + i0;
  for (int r = int(threadIdx.x); r < kTile; r += kThreads) {
    s_lse[r] = r < rows_q ? lse[r] : Acc<T>(0);
    s_delta[r] = r < rows_q ? dl[r] : Acc<T>(0);
  }
}

template <typename T, int kTile>
__device__ __forceinline__ void load_query_tile(const AttentionBwdArgs& a, const Acc<T>* delta,
                                                const BwdSmem<Acc<T>, kTile>& sm, int ld, int64_t b, int64_t h,
                                                int64_t i0, int64_t rows_q) {
  load_query_rows<T, kTile>(a, delta, sm.q, sm.dout, ld, sm.lse, sm.delta, b, h, i0, rows_q);
}

// sm.p and sm.ds for query rows i0 + r and keys j0 + c; zero where masked or past the ends.
template <typename A, int kTile>
__device__ __forceinline__ void probs_and_dscores(const BwdSmem<A, kTile>& sm, int ld, int D, int64_t i0,
                                                  int64_t rows_q, int64_t j0, int64_t rows_k, A scale) {
  constexpr int kR = kTile / kSide;
  const int ty = int(threadIdx.x) / kSide, tx = int(threadIdx.x) % kSide;
  A s[kR][kR] = {}, dp[kR][kR] = {};
  for (int d = 0; d < D; ++d) {
    A qv[kR], ov[kR], kv[kR], vv[kR];
    for (int i = 0; i < kR; ++i) {
      qv[i] = sm.q[(ty + kSide * i) * ld + d];
      ov[i] = sm.dout[(ty + kSide * i) * ld + d];
    }
    for (int j = 0; j < kR; ++j) {
      kv[j] = sm.k[(tx + kSide * j) * ld + d];
      vv[j] = sm.v[(tx + kSide * j) * ld + d];
    }
    for (int i = 0; i < kR; ++i)
      for (int j = 0; j < kR; ++j) {
        s[i][j] += qv[i] * kv[j];
        dp[i][j] += ov[i] * vv[j];
      }
  }
  for (int i = 0; i < kR; ++i)
    for (int j = 0; j < kR; ++j) {
      const int r = ty + kSide * i, c = tx + kSide * j;
      const bool valid = r < rows_q && c < rows_k && j0 + c <= i0 + r;
      const A p = valid ? exp_of(scale * s[i][j] - sm.lse[r]) : A(0);
      sm.p[r * (kTile + 1) + c] = p;
      sm.ds[r * (kTile + 1) + c] = valid ? p * (dp[i][j] - sm.delta[r]) * scale : A(0);
    }
}

// One block per (key tile, kv head g, b): dK, dV of its keys over every query head of the
// group and every query tile at or after the key tile.
template <typename T, int kTile, int kDPT>
__global__ void __launch_bounds__(kThreads) attention_bwd_dkdv_kernel(AttentionBwdArgs a, const Acc<T>* delta) {
  using A = Acc<T>;
  constexpr int kR = kTile / kSide;
  const int D = int(a.D), ld = D + 1;
  FSDP_DYNAMIC_SHARED(A, smem);
  const BwdSmem<A, kTile> sm(smem, ld);
  const int ty = int(threadIdx.x) / kSide, tx = int(threadIdx.x) % kSide;
  const int64_t kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, G = a.H / a.KVH;
  const int64_t j0 = kt * kTile, rows_k = a.T - j0 < kTile ? a.T - j0 : kTile;
  const A scale = A(1.0 / sqrt(double(a.D)));
  load_tile<T, kTile>(sm.k, ld, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, D);
  load_tile<T, kTile>(sm.v, ld, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, D);

  A dk[kR][kDPT] = {}, dv[kR][kDPT] = {};  // key rows ty + 16 i, head-dim columns tx + 16 c
  for (int64_t h = g * G; h < (g + 1) * G; ++h)
    for (int64_t i0 = j0; i0 < a.T; i0 += kTile) {  // tiles are aligned: query tile kt onwards
      const int64_t rows_q = a.T - i0 < kTile ? a.T - i0 : kTile;
      load_query_tile<T, kTile>(a, delta, sm, ld, b, h, i0, rows_q);
      __syncthreads();
      probs_and_dscores<A, kTile>(sm, ld, D, i0, rows_q, j0, rows_k, scale);
      __syncthreads();
      for (int r = 0; r < rows_q; ++r) {
        A pv[kR], dsv[kR];
        for (int i = 0; i < kR; ++i) {
          pv[i] = sm.p[r * (kTile + 1) + ty + kSide * i];
          dsv[i] = sm.ds[r * (kTile + 1) + ty + kSide * i];
        }
        for (int dc = 0; dc < kDPT; ++dc) {
          const int d = tx + kSide * dc;
          if (d < D) {
            const A ov = sm.dout[r * ld + d], qv = sm.q[r * ld + d];
            for (int i = 0; i < kR; ++i) {
              dv[i][dc] += pv[i] * ov;
              dk[i][dc] += dsv[i] * qv;
            }
          }
        }
      }
      __syncthreads();
    }

  for (int i = 0; i < kR; ++i) {
    const int c = ty + kSide * i;
    if (c >= rows_k) continue;
    T* dkr = head_row_mut<T>(a.dk, b, j0 + c, g);
    T* dvr = head_row_mut<T>(a.dv, b, j0 + c, g);
    for (int dc = 0; dc < kDPT; ++dc) {
      const int d = tx + kSide * dc;
      if (d < D) {
        dkr[d] = Elem<T>::store(dk[i][dc]);
        dvr[d] = Elem<T>::store(dv[i][dc]);
      }
    }
  }
}

// One block per (query tile, h, b): dQ of its rows over the key tiles they see, in order.
template <typename T, int kTile, int kDPT>
__global__ void __launch_bounds__(kThreads) attention_bwd_dq_kernel(AttentionBwdArgs a, const Acc<T>* delta) {
  using A = Acc<T>;
  constexpr int kR = kTile / kSide;
  const int D = int(a.D), ld = D + 1;
  FSDP_DYNAMIC_SHARED(A, smem);
  const BwdSmem<A, kTile> sm(smem, ld);
  const int ty = int(threadIdx.x) / kSide, tx = int(threadIdx.x) % kSide;
  const int64_t qt = int64_t(gridDim.x) - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / (a.H / a.KVH);
  const int64_t i0 = qt * kTile, rows_q = a.T - i0 < kTile ? a.T - i0 : kTile;
  const A scale = A(1.0 / sqrt(double(a.D)));
  load_query_tile<T, kTile>(a, delta, sm, ld, b, h, i0, rows_q);

  A dq[kR][kDPT] = {};  // query rows ty + 16 i, head-dim columns tx + 16 c
  for (int64_t j0 = 0; j0 < i0 + rows_q; j0 += kTile) {
    const int64_t rows_k = a.T - j0 < kTile ? a.T - j0 : kTile;
    load_tile<T, kTile>(sm.k, ld, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, D);
    load_tile<T, kTile>(sm.v, ld, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, D);
    __syncthreads();
    probs_and_dscores<A, kTile>(sm, ld, D, i0, rows_q, j0, rows_k, scale);
    __syncthreads();
    for (int c = 0; c < rows_k; ++c) {
      A dsv[kR];
      for (int i = 0; i < kR; ++i) dsv[i] = sm.ds[(ty + kSide * i) * (kTile + 1) + c];
      for (int dc = 0; dc < kDPT; ++dc) {
        const int d = tx + kSide * dc;
        if (d < D) {
          const A kv = sm.k[c * ld + d];
          for (int i = 0; i < kR; ++i) dq[i][dc] += dsv[i] * kv;
        }
      }
    }
    __syncthreads();
  }

  for (int i = 0; i < kR; ++i) {
    const int r = ty + kSide * i;
    if (r >= rows_q) continue;
    T* dqr = head_row_mut<T>(a.dq, b, i0 + r, h);
    for (int dc = 0; dc < kDPT; ++dc) {
      const int d = tx + kSide * dc;
      if (d < D) dqr[d] = Elem<T>::store(dq[i][dc]);
    }
  }
}

// ---- tensor cores (bfloat16, float16; D = 64, 128) ----------------------------------------
// The same algorithms as above, their products on WMMA (see the header comment): 64 x 64
// tiles, 8 warps, each product split into 16 x 16 tiles that the warps take in turn
// (tile t to warp t % 8). Operand tiles are 16-bit in shared memory, rows padded by 8
// elements (16 bytes: WMMA's ldm rule, and consecutive rows start in different banks);
// score tiles and output staging are float, rows padded by 4. Every array starts 32 bytes
// aligned (WMMA's rule for a tile pointer; tiles start at multiples of 16 rows and 16
// columns, so each tile pointer keeps it).
namespace wmma = nvcuda::wmma;

constexpr int kTcTile = 64;
constexpr int kTcWarps = kThreads / 32;
constexpr int kTcSub = kTcTile / 16;  // 16 x 16 tiles per tile side
constexpr int kTcLdS = kTcTile + 4;   // float score tiles
constexpr int kTcLdP = kTcTile + 8;   // 16-bit probability / dS tiles

using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <typename M, typename L>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, M, L>;
template <typename M, typename L>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, M, L>;

constexpr size_t tc_round(size_t bytes) { return (bytes + 31) / 32 * 32; }

__device__ __forceinline__ unsigned char* align32(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 31) & ~uintptr_t(31));
}

// acc += A B over k = 16 * ksteps: A row-major (or col-major) 16 x 16 tiles a + kk * a_step,
// B tiles b + kk * b_step, with leading dimensions lda, ldb.
template <typename LA, typename LB, typename M>
__device__ __forceinline__ void mma_k(FragAcc& acc, const M* a, int lda, int a_step, const M* b, int ldb, int b_step,
                                      int ksteps) {
  for (int kk = 0; kk < ksteps; ++kk) {
    FragA<M, LA> fa;
    FragB<M, LB> fb;
    wmma::load_matrix_sync(fa, a + kk * a_step, unsigned(lda));
    wmma::load_matrix_sync(fb, b + kk * b_step, unsigned(ldb));
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// Shared memory of the forward: Q, K, V tiles (16-bit), the float scores, the 16-bit
// probabilities, the float output accumulator O and the rows' rescale factors. O lives in
// shared memory, not in fragments, because the online softmax rescales it by row, and a
// fragment's element-to-row mapping is unspecified.
template <int kD>
struct TcFwdSmem {
  static constexpr int ldh = kD + 8, ldo = kD + 4;
  static constexpr size_t q = 0, k = q + tc_round(kTcTile * ldh * 2), v = k + tc_round(kTcTile * ldh * 2),
                          s = v + tc_round(kTcTile * ldh * 2), p = s + tc_round(kTcTile * kTcLdS * 4),
                          o = p + tc_round(kTcTile * kTcLdP * 2), row = o + tc_round(kTcTile * ldo * 4),
                          bytes = row + tc_round(kTcTile * 4) + 32;  // + 32: aligning the base
};

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) attention_fwd_tc_kernel(AttentionFwdArgs a) {
  using M = typename MmaElem<T>::type;
  using L = TcFwdSmem<kD>;
  constexpr int ldh = L::ldh, ldo = L::ldo, kRowLanes = kThreads / kTcTile, kRowCols = kTcTile / kRowLanes;
  constexpr int kDSub = kD / 16;
  FSDP_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* base = align32(raw);
  M* sQ = reinterpret_cast<M*>(base + L::q);
  M* sK = reinterpret_cast<M*>(base + L::k);
  M* sV = reinterpret_cast<M*>(base + L::v);
  float* sS = reinterpret_cast<float*>(base + L::s);
  M* sP = reinterpret_cast<M*>(base + L::p);
  float* sO = reinterpret_cast<float*>(base + L::o);
  float* sRow = reinterpret_cast<float*>(base + L::row);
  const int tid = int(threadIdx.x), warp = tid / 32;
  const int64_t qt = int64_t(gridDim.x) - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / (a.H / a.KVH);
  const int64_t i0 = qt * kTcTile;
  const int64_t rows_q = a.T - i0 < kTcTile ? a.T - i0 : kTcTile;
  const int64_t nk = a.q_pos + i0 + rows_q;
  const float scale = float(1.0 / sqrt(double(kD)));

  load_tile<T, kTcTile>(sQ, ldh, head_row<T>(a.q, b, i0, h), a.q.st, rows_q, kD);
  for (int i = tid; i < kTcTile * ldo; i += kThreads) sO[i] = 0.0f;

  const int sr = tid / kRowLanes, sp = tid % kRowLanes;  // the softmax pass, as in the FMA kernel
  float m = -INFINITY, l = 0.0f;

  for (int64_t j0 = 0; j0 < nk; j0 += kTcTile) {
    const int64_t rows_k = nk - j0 < kTcTile ? nk - j0 : kTcTile;
    load_tile<T, kTcTile>(sK, ldh, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, kD);
    load_tile<T, kTcTile>(sV, ldh, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, kD);
    __syncthreads();

    // S = scale Q K^T; K^T is K's rows read as a column-major matrix_b.
    for (int t = warp; t < kTcSub * kTcSub; t += kTcWarps) {
      const int tr = t / kTcSub, tc = t % kTcSub;
      FragAcc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_k<wmma::row_major, wmma::col_major>(acc, sQ + tr * 16 * ldh, ldh, 16, sK + tc * 16 * ldh, ldh, 16, kDSub);
      for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale;  // every element alike: layout-free
      wmma::store_matrix_sync(sS + tr * 16 * kTcLdS + tc * 16, acc, kTcLdS, wmma::mem_row_major);
    }
    __syncthreads();

    // Row sr: mask, running max and sum, O's row rescaled. P is rounded to 16 bits as the
    // PV operand; l sums the float values, so lse keeps float accuracy for the backward.
    {
      const float* row = sS + sr * kTcLdS;
      const int64_t last_key = a.q_pos + i0 + sr;  // rows past T see keys <= their position
      float tmax = -INFINITY;
      for (int c = sp * kRowCols; c < (sp + 1) * kRowCols; ++c)
        if (j0 + c <= last_key && c < rows_k) tmax = row[c] > tmax ? row[c] : tmax;
      for (int off = kRowLanes / 2; off > 0; off >>= 1) {
        const float other = __shfl_xor_sync(kFullMask, tmax, off);
        tmax = other > tmax ? other : tmax;
      }
      const float m_new = tmax > m ? tmax : m;  // finite: key 0 is in the first tile
      const float alpha = expf(m - m_new);
      float sum = 0.0f;
      for (int c = sp * kRowCols; c < (sp + 1) * kRowCols; ++c) {
        const float p = j0 + c <= last_key && c < rows_k ? expf(row[c] - m_new) : 0.0f;
        sP[sr * kTcLdP + c] = MmaElem<T>::round(p);
        sum += p;
      }
      for (int off = kRowLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
      l = l * alpha + sum;
      m = m_new;
      for (int d = sp * (kD / kRowLanes); d < (sp + 1) * (kD / kRowLanes); ++d) sO[sr * ldo + d] *= alpha;
    }
    __syncthreads();

    // O += P V over the key sub-tiles that hold keys (P is 0 past rows_k).
    const int ksteps = int((rows_k + 15) / 16);
    for (int t = warp; t < kTcSub * kDSub; t += kTcWarps) {
      const int tr = t / kDSub, tc = t % kDSub;
      FragAcc acc;
      float* o = sO + tr * 16 * ldo + tc * 16;
      wmma::load_matrix_sync(acc, o, ldo, wmma::mem_row_major);
      mma_k<wmma::row_major, wmma::row_major>(acc, sP + tr * 16 * kTcLdP, kTcLdP, 16, sV + tc * 16, ldh, 16 * ldh,
                                              ksteps);
      wmma::store_matrix_sync(o, acc, ldo, wmma::mem_row_major);
    }
    __syncthreads();
  }

  if (sp == 0) {
    sRow[sr] = 1.0f / l;
    if (a.lse != nullptr && sr < rows_q) static_cast<float*>(a.lse)[(b * a.H + h) * a.T + i0 + sr] = m + logf(l);
  }
  __syncthreads();
  for (int i = tid; i < rows_q * kD; i += kThreads) {
    const int r = i / kD, d = i % kD;
    head_row_mut<T>(a.out, b, i0 + r, h)[d] = Elem<T>::store(sO[r * ldo + d] * sRow[r]);
  }
}

// Shared memory of the backward kernels: the float S and dP tiles (then the staging of the
// output tile, float [kTcTile][kD + 4], which fits in their place), 16-bit P and dS, the
// 16-bit Q_i, dO_i, K_j, V_j, and lse_i, delta_i.
template <int kD>
struct TcBwdSmem {
  static constexpr int ldh = kD + 8, ldo = kD + 4;
  static constexpr size_t score_bytes = 2 * kTcTile * kTcLdS * 4, stage_bytes = kTcTile * ldo * 4;
  static constexpr size_t s = 0, dp = kTcTile * kTcLdS * 4,
                          p = tc_round(score_bytes > stage_bytes ? score_bytes : stage_bytes),
                          ds = p + tc_round(kTcTile * kTcLdP * 2), q = ds + tc_round(kTcTile * kTcLdP * 2),
                          dout = q + tc_round(kTcTile * ldh * 2), k = dout + tc_round(kTcTile * ldh * 2),
                          v = k + tc_round(kTcTile * ldh * 2), lse = v + tc_round(kTcTile * ldh * 2),
                          delta = lse + tc_round(kTcTile * 4), bytes = delta + tc_round(kTcTile * 4) + 32;
};

template <typename M, int kD>
struct TcBwdTiles {
  float *s, *dp, *stage, *lse, *delta;
  M *p, *ds, *q, *dout, *k, *v;
  __device__ explicit TcBwdTiles(unsigned char* raw) {
    using L = TcBwdSmem<kD>;
    unsigned char* base = align32(raw);
    s = reinterpret_cast<float*>(base + L::s);
    dp = reinterpret_cast<float*>(base + L::dp);
    stage = s;
    lse = reinterpret_cast<float*>(base + L::lse);
    delta = reinterpret_cast<float*>(base + L::delta);
    p = reinterpret_cast<M*>(base + L::p);
    ds = reinterpret_cast<M*>(base + L::ds);
    q = reinterpret_cast<M*>(base + L::q);
    dout = reinterpret_cast<M*>(base + L::dout);
    k = reinterpret_cast<M*>(base + L::k);
    v = reinterpret_cast<M*>(base + L::v);
  }
};

// sm.p and sm.ds (16-bit) for query rows i0 + r and keys j0 + c, zero where masked or past
// the ends, from S = Q K^T and dP = dO V^T on WMMA. Called by every thread, with the
// operand tiles loaded and a barrier behind them; ends with a barrier.
template <typename T, int kD>
__device__ __forceinline__ void tc_probs_and_dscores(const TcBwdTiles<typename MmaElem<T>::type, kD>& sm, int64_t i0,
                                                     int64_t rows_q, int64_t j0, int64_t rows_k, float scale) {
  constexpr int ldh = TcBwdSmem<kD>::ldh, kTiles = kTcSub * kTcSub;
  const int tid = int(threadIdx.x), warp = tid / 32;
  for (int t = warp; t < 2 * kTiles; t += kTcWarps) {  // S's tiles, then dP's
    const bool is_dp = t >= kTiles;
    const int tr = (t % kTiles) / kTcSub, tc = t % kTcSub;
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_k<wmma::row_major, wmma::col_major>(acc, (is_dp ? sm.dout : sm.q) + tr * 16 * ldh, ldh, 16,
                                            (is_dp ? sm.v : sm.k) + tc * 16 * ldh, ldh, 16, kD / 16);
    wmma::store_matrix_sync((is_dp ? sm.dp : sm.s) + tr * 16 * kTcLdS + tc * 16, acc, kTcLdS, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < kTcTile * kTcTile; e += kThreads) {
    const int r = e / kTcTile, c = e % kTcTile;
    const bool valid = r < rows_q && c < rows_k && j0 + c <= i0 + r;
    const float p = valid ? expf(scale * sm.s[r * kTcLdS + c] - sm.lse[r]) : 0.0f;
    sm.p[r * kTcLdP + c] = MmaElem<T>::round(p);
    sm.ds[r * kTcLdP + c] = MmaElem<T>::round(valid ? p * (sm.dp[r * kTcLdS + c] - sm.delta[r]) * scale : 0.0f);
  }
  __syncthreads();
}

// Writes the float staging tile's rows < rows (row stride ld) to dst rows t0 + r, head hd.
template <typename T, int kD>
__device__ __forceinline__ void tc_write_rows(const float* stage, const HeadsView& dst, int64_t b, int64_t t0,
                                              int64_t hd, int64_t rows) {
  for (int i = int(threadIdx.x); i < rows * kD; i += kThreads) {
    const int r = i / kD, d = i % kD;
    head_row_mut<T>(dst, b, t0 + r, hd)[d] = Elem<T>::store(stage[r * TcBwdSmem<kD>::ldo + d]);
  }
}

// One block per (key tile, kv head g, b), as attention_bwd_dkdv_kernel. Warps 0-3 own dK's
// 16-row strip 16 (warp % 4) of the key tile, warps 4-7 dV's; each keeps its strip's kD / 16
// accumulator tiles in fragments across every query tile of every head of the group.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) attention_bwd_dkdv_tc_kernel(AttentionBwdArgs a, const float* delta) {
  using M = typename MmaElem<T>::type;
  constexpr int ldh = TcBwdSmem<kD>::ldh, ldo = TcBwdSmem<kD>::ldo, kDSub = kD / 16;
  FSDP_DYNAMIC_SHARED(unsigned char, raw);
  const TcBwdTiles<M, kD> sm(raw);
  const int warp = int(threadIdx.x) / 32, strip = warp % kTcSub;
  const bool is_dv = warp >= kTcSub;
  const int64_t kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, G = a.H / a.KVH;
  const int64_t j0 = kt * kTcTile, rows_k = a.T - j0 < kTcTile ? a.T - j0 : kTcTile;
  const float scale = float(1.0 / sqrt(double(kD)));
  load_tile<T, kTcTile>(sm.k, ldh, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, kD);
  load_tile<T, kTcTile>(sm.v, ldh, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, kD);

  FragAcc acc[kDSub];
  for (int c = 0; c < kDSub; ++c) wmma::fill_fragment(acc[c], 0.0f);
  for (int64_t h = g * G; h < (g + 1) * G; ++h)
    for (int64_t i0 = j0; i0 < a.T; i0 += kTcTile) {
      const int64_t rows_q = a.T - i0 < kTcTile ? a.T - i0 : kTcTile;
      load_query_rows<T, kTcTile>(a, delta, sm.q, sm.dout, ldh, sm.lse, sm.delta, b, h, i0, rows_q);
      __syncthreads();
      tc_probs_and_dscores<T, kD>(sm, i0, rows_q, j0, rows_k, scale);
      // dV += P^T dO, dK += dS^T Q: the transpose is P (dS) read as a column-major matrix_a.
      const M* lhs = is_dv ? sm.p : sm.ds;
      const M* rhs = is_dv ? sm.dout : sm.q;
      const int ksteps = int((rows_q + 15) / 16);
      for (int c = 0; c < kDSub; ++c)
        mma_k<wmma::col_major, wmma::row_major>(acc[c], lhs + strip * 16, kTcLdP, 16 * kTcLdP, rhs + c * 16, ldh,
                                                16 * ldh, ksteps);
      __syncthreads();
    }

  for (int round = 0; round < 2; ++round) {  // dK through the staging tile, then dV
    if (is_dv == (round == 1))
      for (int c = 0; c < kDSub; ++c)
        wmma::store_matrix_sync(sm.stage + strip * 16 * ldo + c * 16, acc[c], ldo, wmma::mem_row_major);
    __syncthreads();
    tc_write_rows<T, kD>(sm.stage, round == 0 ? a.dk : a.dv, b, j0, g, rows_k);
    __syncthreads();
  }
}

// One block per (query tile, h, b), as attention_bwd_dq_kernel. Warp w owns dQ's 16-row
// strip 16 (w % 4) and half (w / 4) of its columns: kD / 32 accumulator tiles.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) attention_bwd_dq_tc_kernel(AttentionBwdArgs a, const float* delta) {
  using M = typename MmaElem<T>::type;
  constexpr int ldh = TcBwdSmem<kD>::ldh, ldo = TcBwdSmem<kD>::ldo, kCols = kD / 32;
  FSDP_DYNAMIC_SHARED(unsigned char, raw);
  const TcBwdTiles<M, kD> sm(raw);
  const int warp = int(threadIdx.x) / 32, strip = warp % kTcSub, c0 = (warp / kTcSub) * kCols;
  const int64_t qt = int64_t(gridDim.x) - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y, b = blockIdx.z, g = h / (a.H / a.KVH);
  const int64_t i0 = qt * kTcTile, rows_q = a.T - i0 < kTcTile ? a.T - i0 : kTcTile;
  const float scale = float(1.0 / sqrt(double(kD)));
  load_query_rows<T, kTcTile>(a, delta, sm.q, sm.dout, ldh, sm.lse, sm.delta, b, h, i0, rows_q);

  FragAcc acc[kCols];
  for (int c = 0; c < kCols; ++c) wmma::fill_fragment(acc[c], 0.0f);
  for (int64_t j0 = 0; j0 < i0 + rows_q; j0 += kTcTile) {
    const int64_t rows_k = a.T - j0 < kTcTile ? a.T - j0 : kTcTile;
    load_tile<T, kTcTile>(sm.k, ldh, head_row<T>(a.k, b, j0, g), a.k.st, rows_k, kD);
    load_tile<T, kTcTile>(sm.v, ldh, head_row<T>(a.v, b, j0, g), a.v.st, rows_k, kD);
    __syncthreads();
    tc_probs_and_dscores<T, kD>(sm, i0, rows_q, j0, rows_k, scale);
    const int ksteps = int((rows_k + 15) / 16);  // dQ += dS K
    for (int c = 0; c < kCols; ++c)
      mma_k<wmma::row_major, wmma::row_major>(acc[c], sm.ds + strip * 16 * kTcLdP, kTcLdP, 16, sm.k + (c0 + c) * 16,
                                              ldh, 16 * ldh, ksteps);
    __syncthreads();
  }

  for (int c = 0; c < kCols; ++c)
    wmma::store_matrix_sync(sm.stage + strip * 16 * ldo + (c0 + c) * 16, acc[c], ldo, wmma::mem_row_major);
  __syncthreads();
  tc_write_rows<T, kD>(sm.stage, a.dq, b, i0, h, rows_q);
}

// ---- launchers ----------------------------------------------------------------------------
unsigned tiles(int64_t n, int tile) { return unsigned((n + tile - 1) / tile); }

template <typename K>
void allow_smem(K* kernel, size_t bytes) {
  FSDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename T, int kTile, int kDPT>
void forward_cfg(const AttentionFwdArgs& a, cudaStream_t s) {
  const size_t smem = size_t(fwd_smem_elems(kTile, a.D)) * sizeof(Acc<T>);
  allow_smem(attention_fwd_kernel<T, kTile, kDPT>, smem);
  const dim3 grid(tiles(a.T, kTile), unsigned(a.H), unsigned(a.B));
  FSDP_LAUNCH((attention_fwd_kernel<T, kTile, kDPT>), grid, kThreads, smem, s, a);
}

template <typename T, int kTile, int kDPT>
void backward_cfg(const AttentionBwdArgs& a, const Acc<T>* delta, cudaStream_t s) {
  const size_t smem = size_t(bwd_smem_elems(kTile, a.D)) * sizeof(Acc<T>);
  allow_smem(attention_bwd_dkdv_kernel<T, kTile, kDPT>, smem);
  allow_smem(attention_bwd_dq_kernel<T, kTile, kDPT>, smem);
  FSDP_LAUNCH((attention_bwd_dkdv_kernel<T, kTile, kDPT>), dim3(tiles(a.T, kTile), unsigned(a.KVH), unsigned(a.B)),
              kThreads, smem, s, a, delta);
  FSDP_LAUNCH((attention_bwd_dq_kernel<T, kTile, kDPT>), dim3(tiles(a.T, kTile), unsigned(a.H), unsigned(a.B)),
              kThreads, smem, s, a, delta);
}

std::atomic<uint64_t> g_tensor_core_launches{0};

// The head dims with tensor-core kernels (kD / 32 accumulator tiles per warp in dQ).
constexpr bool tc_head_dim(int64_t D) { return D == 64 || D == 128; }

template <typename T>
constexpr bool tc_type = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Shared memory: forward 70 KiB (D = 64) / 110 KiB (D = 128), backward 76 / 121 KiB, within
// an A100's 163 KiB.
template <typename T, int kD>
void forward_tc(const AttentionFwdArgs& a, cudaStream_t s) {
  constexpr size_t smem = TcFwdSmem<kD>::bytes;
  allow_smem(attention_fwd_tc_kernel<T, kD>, smem);
  FSDP_LAUNCH((attention_fwd_tc_kernel<T, kD>), dim3(tiles(a.T, kTcTile), unsigned(a.H), unsigned(a.B)), kThreads,
              smem, s, a);
  g_tensor_core_launches.fetch_add(1, std::memory_order_relaxed);
}

template <typename T, int kD>
void backward_tc(const AttentionBwdArgs& a, const float* delta, cudaStream_t s) {
  constexpr size_t smem = TcBwdSmem<kD>::bytes;
  allow_smem(attention_bwd_dkdv_tc_kernel<T, kD>, smem);
  allow_smem(attention_bwd_dq_tc_kernel<T, kD>, smem);
  FSDP_LAUNCH((attention_bwd_dkdv_tc_kernel<T, kD>), dim3(tiles(a.T, kTcTile), unsigned(a.KVH), unsigned(a.B)),
              kThreads, smem, s, a, delta);
  FSDP_LAUNCH((attention_bwd_dq_tc_kernel<T, kD>), dim3(tiles(a.T, kTcTile), unsigned(a.H), unsigned(a.B)), kThreads,
              smem, s, a, delta);
  g_tensor_core_launches.fetch_add(2, std::memory_order_relaxed);
}

// Tiles per head dim, so that shared memory stays within an A100's 163 KiB: 64-row tiles
// where they fit (fewer passes over K/V, more work per shared load), else 32 or 16.
// bfloat16 and float16 with a tensor-core head dim take the WMMA kernels.
template <typename T>
void forward_t(const AttentionFwdArgs& a, cudaStream_t s) {
  if constexpr (tc_type<T>) {
    if (a.D == 64) return forward_tc<T, 64>(a, s);
    if (a.D == 128) return forward_tc<T, 128>(a, s);
  }
  if constexpr (sizeof(Acc<T>) == 8) {
    if (a.D <= 64) return forward_cfg<T, 32, 4>(a, s);
    if (a.D <= 128) return forward_cfg<T, 32, 8>(a, s);
    return forward_cfg<T, 16, 16>(a, s);
  } else {
    if (a.D <= 64) return forward_cfg<T, 64, 4>(a, s);
    if (a.D <= 128) return forward_cfg<T, 64, 8>(a, s);
    return forward_cfg<T, 32, 16>(a, s);
  }
}

template <typename T>
void backward_kernels(const AttentionBwdArgs& a, const Acc<T>* delta, cudaStream_t s) {
  if constexpr (tc_type<T>) {
    if (a.D == 64) return backward_tc<T, 64>(a, delta, s);
    if (a.D == 128) return backward_tc<T, 128>(a, delta, s);
  }
  if constexpr (sizeof(Acc<T>) == 8) {
    if (a.D <= 64) backward_cfg<T, 32, 4>(a, delta, s);
    else if (a.D <= 128) backward_cfg<T, 32, 8>(a, delta, s);
    else backward_cfg<T, 16, 16>(a, delta, s);
  } else {
    if (a.D <= 64) backward_cfg<T, 64, 4>(a, delta, s);
    else if (a.D <= 128) backward_cfg<T, 32, 8>(a, delta, s);
    else backward_cfg<T, 32, 16>(a, delta, s);
  }
}

template <typename T>
void backward_t(const AttentionBwdArgs& a, cudaStream_t s) {
  Acc<T>* delta = nullptr;
  const int64_t rows = a.B * a.T * a.H;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&delta), size_t(rows) * sizeof(Acc<T>), s));
  FSDP_LAUNCH(attention_bwd_delta_kernel<T>, blocks_for(rows, kThreads / 32), kThreads, 0, s, a, delta);
  backward_kernels<T>(a, delta, s);
  FSDP_CUDA_CHECK(cudaFreeAsync(delta, s));
}

}  // namespace

bool attention_supports(DType t, int64_t head_dim) {
  return is_floating(t) && head_dim <= kAttentionMaxHeadDim;
}

bool attention_uses_tensor_cores(DType t, int64_t head_dim) {
  return (t == DType::BF16 || t == DType::F16) && tc_head_dim(head_dim);
}

uint64_t attention_tensor_core_launches() { return g_tensor_core_launches.load(std::memory_order_relaxed); }

void launch_attention_forward(DType t, const AttentionFwdArgs& a, cudaStream_t stream) {
  if (t == DType::F32) return forward_t<float>(a, stream);
  if (t == DType::F64) return forward_t<double>(a, stream);
  if (t == DType::BF16) return forward_t<bf16>(a, stream);
  if (t == DType::F16) return forward_t<f16>(a, stream);
}

void launch_attention_backward(DType t, const AttentionBwdArgs& a, cudaStream_t stream) {
  if (t == DType::F32) return backward_t<float>(a, stream);
  if (t == DType::F64) return backward_t<double>(a, stream);
  if (t == DType::BF16) return backward_t<bf16>(a, stream);
  if (t == DType::F16) return backward_t<f16>(a, stream);
}

}  // namespace fsdp::cuda
