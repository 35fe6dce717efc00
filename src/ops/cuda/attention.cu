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
// Documents (Note [Document masking] in fsdp/ops/attention.h; attention_tiles.cuh): key
// tiles wholly before a query tile's first document are skipped, in all three kernels.
//
// Tensor cores: bfloat16 and float16 with D = 64 or 128 (the Llama head dims) run the same
// algorithms with their products on WMMA: attention_tc.cu. The launchers below pick the
// path (attention_uses_tensor_cores); float32, float64 and other head dims stay here.
#include "attention.cuh"
#include "attention_tiles.cuh"
#include "common.cuh"

namespace fsdp::cuda {
namespace {

using namespace attn;

constexpr int kSide = 16;  // the thread grid is kSide x kSide

// Shared memory of the kernels, in elements of the accumulation type.
constexpr int64_t fwd_smem_elems(int tile, int64_t D) { return 3 * tile * (D + 1) + tile * (tile + 1) + tile; }
constexpr int64_t bwd_smem_elems(int tile, int64_t D) { return 4 * tile * (D + 1) + 2 * tile * (tile + 1) + 2 * tile; }

// ---- forward ----------------------------------------------------------------------------
// s[i][j] += Q row (ty + kSide i) . K row (tx + kSide j), summed over d in order.
template <typename A, int kR>
__device__ __forceinline__ void add_score_block(const A* sQ, const A* sK, int ld, int D, int ty, int tx,
                                                A (&s)[kR][kR]) {
  for (int d = 0; d < D; ++d) {
    A qv[kR], kv[kR];
    for (int i = 0; i < kR; ++i) qv[i] = sQ[(ty + kSide * i) * ld + d];
    for (int j = 0; j < kR; ++j) kv[j] = sK[(tx + kSide * j) * ld + d];
    for (int i = 0; i < kR; ++i)
      for (int j = 0; j < kR; ++j) s[i][j] += qv[i] * kv[j];
  }
}

// One online-softmax step of a score row, by this lane's kRowCols columns of it (the row's
// kRowLanes lanes are consecutive): the scores become P = exp(S - m'), rowsum P is folded
// into l, and the factor exp(m - m') that the row of O must be rescaled by is returned.
template <typename A, int kRowLanes, int kRowCols>
__device__ __forceinline__ A online_softmax_step(A* row, A& m, A& l) {
  A tmax = -INFINITY;
  for (int c = 0; c < kRowCols; ++c) tmax = row[c] > tmax ? row[c] : tmax;
  for (int off = kRowLanes / 2; off > 0; off >>= 1) {
    const A other = __shfl_xor_sync(kFullMask, tmax, off);
    tmax = other > tmax ? other : tmax;
  }
  // m_new is -inf only while a row has seen no key of its document yet (documents: the
  // first tiles may hold only an earlier one); then P = 0 and nothing is rescaled.
  const A m_new = tmax > m ? tmax : m;
  const A alpha = m_new == A(-INFINITY) ? A(1) : exp_of(m - m_new);
  A sum = A(0);
  for (int c = 0; c < kRowCols; ++c) {
    const A p = row[c] == A(-INFINITY) ? A(0) : exp_of(row[c] - m_new);
    row[c] = p;
    sum += p;
  }
  for (int off = kRowLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

// o = o * alpha(row) + P V over the tile's rows_k keys (P is 0 past them: skipped).
template <typename A, int kR, int kDPT>
__device__ __forceinline__ void rescale_add_pv(const A* sS, int lds, const A* sV, int ld, const A* sRow,
                                               int64_t rows_k, int D, int ty, int tx, A (&o)[kR][kDPT]) {
  for (int i = 0; i < kR; ++i) {
    const A alpha = sRow[ty + kSide * i];
    for (int c = 0; c < kDPT; ++c) o[i][c] *= alpha;
  }
  for (int c = 0; c < rows_k; ++c) {
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
}

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
  int64_t lo[kR];  // each score row's first visible key (rows past T: 0, they are not written)
  for (int i = 0; i < kR; ++i) {
    const int r = ty + kSide * i;
    lo[i] = r < rows_q ? doc_lo(a.doc_start, a.T, b, i0 + r) : 0;
  }

  for (int64_t j0 = first_key_tile<kTile>(a.doc_start, a.T, b, i0); j0 < nk; j0 += kTile) {
    const int64_t rows_k = nk - j0 < kTile ? nk - j0 : kTile;
    load_kv_tiles<T, kTile>(a, sK, sV, ld, b, j0, g, rows_k, D);
    __syncthreads();

    A s[kR][kR] = {};
    add_score_block<A, kR>(sQ, sK, ld, D, ty, tx, s);
    for (int i = 0; i < kR; ++i)
      for (int j = 0; j < kR; ++j) {
        const int r = ty + kSide * i, c = tx + kSide * j;
        // Rows past T see keys <= their (virtual) position, so every row has key 0.
        const bool visible = j0 + c <= a.q_pos + i0 + r && j0 + c < nk && j0 + c >= lo[i];
        sS[r * lds + c] = visible ? scale * s[i][j] : A(-INFINITY);
      }
    __syncthreads();

    const A alpha = online_softmax_step<A, kRowLanes, kRowCols>(sS + sr * lds + sp * kRowCols, m, l);
    if (sp == 0) sRow[sr] = alpha;
    __syncthreads();

    rescale_add_pv<A, kR, kDPT>(sS, lds, sV, ld, sRow, rows_k, D, ty, tx, o);
    __syncthreads();
  }

  if (sp == 0) {
    sRow[sr] = A(1) / l;
    if (a.lse != nullptr && sr < rows_q) static_cast<Stat<T>*>(a.lse)[(b * a.H + h) * a.T + i0 + sr] = m + log_of(l);
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

template <typename T, int kTile>
__device__ __forceinline__ void load_query_tile(const AttentionBwdArgs& a, const Acc<T>* delta,
                                                const BwdSmem<Acc<T>, kTile>& sm, int ld, int64_t b, int64_t h,
                                                int64_t i0, int64_t rows_q) {
  load_query_rows<T, kTile>(a, delta, sm.q, sm.dout, ld, sm.lse, sm.delta, b, h, i0, rows_q);
}

// sm.p and sm.ds for query rows i0 + r and keys j0 + c; zero where masked or past the ends.
template <typename A, int kTile>
__device__ __forceinline__ void probs_and_dscores(const BwdSmem<A, kTile>& sm, int ld, int D, const AttentionBwdArgs& a,
                                                  int64_t b, int64_t i0, int64_t rows_q, int64_t j0, int64_t rows_k,
                                                  A scale) {
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
  for (int i = 0; i < kR; ++i) {
    const int r = ty + kSide * i;
    const int64_t lo = r < rows_q ? doc_lo(a.doc_start, a.T, b, i0 + r) : 0;
    for (int j = 0; j < kR; ++j) {
      const int c = tx + kSide * j;
      const bool valid = r < rows_q && c < rows_k && j0 + c <= i0 + r && j0 + c >= lo;
      const A p = valid ? exp_of(scale * s[i][j] - sm.lse[r]) : A(0);
      sm.p[r * (kTile + 1) + c] = p;
      sm.ds[r * (kTile + 1) + c] = valid ? p * (dp[i][j] - sm.delta[r]) * scale : A(0);
    }
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
  load_kv_tiles<T, kTile>(a, sm.k, sm.v, ld, b, j0, g, rows_k, D);

  A dk[kR][kDPT] = {}, dv[kR][kDPT] = {};  // key rows ty + 16 i, head-dim columns tx + 16 c
  for (int64_t h = g * G; h < (g + 1) * G; ++h)
    // Tiles are aligned: query tile kt onwards, up to the last one that sees these keys.
    for (int64_t i0 = j0; i0 < a.T && sees_keys_before(a.doc_start, a.T, b, i0, j0 + rows_k); i0 += kTile) {
      const int64_t rows_q = a.T - i0 < kTile ? a.T - i0 : kTile;
      load_query_tile<T, kTile>(a, delta, sm, ld, b, h, i0, rows_q);
      __syncthreads();
      probs_and_dscores<A, kTile>(sm, ld, D, a, b, i0, rows_q, j0, rows_k, scale);
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
  for (int64_t j0 = first_key_tile<kTile>(a.doc_start, a.T, b, i0); j0 < i0 + rows_q; j0 += kTile) {
    const int64_t rows_k = a.T - j0 < kTile ? a.T - j0 : kTile;
    load_kv_tiles<T, kTile>(a, sm.k, sm.v, ld, b, j0, g, rows_k, D);
    __syncthreads();
    probs_and_dscores<A, kTile>(sm, ld, D, a, b, i0, rows_q, j0, rows_k, scale);
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

// ---- launchers ----------------------------------------------------------------------------
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

// Tiles per head dim, so that shared memory stays within an A100's 163 KiB: 64-row tiles
// where they fit (fewer passes over K/V, more work per shared load), else 32 or 16.
// bfloat16 and float16 with a tensor-core head dim take the WMMA kernels (attention_tc.cu).
template <typename T>
void forward_t(const AttentionFwdArgs& a, cudaStream_t s) {
  if (attention_uses_tensor_cores(dtype_of<T>, a.D)) return launch_attention_forward_tc(dtype_of<T>, a, s);
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
  if constexpr (sizeof(Acc<T>) == 4) {  // the tensor-core kernels take float32 delta
    if (attention_uses_tensor_cores(dtype_of<T>, a.D)) return launch_attention_backward_tc(dtype_of<T>, a, delta, s);
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
