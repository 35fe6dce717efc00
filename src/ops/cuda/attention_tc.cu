// Causal GQA attention on tensor cores: bfloat16 and float16 with D = 64 or 128 (the Llama
// head dims), the algorithms of attention.cu (its header comment has the math) with their
// products on WMMA (nvcuda::wmma, m16n16k16, 16-bit operands, float accumulation, sm_80+):
// S = Q K^T and O += P V forward; S, dP = dO V^T, dV += P^T dO, dK += dS^T Q and dQ += dS K
// backward, with attention.cu's delta kernel first and its two-pass split (dK, dV per key
// tile; dQ per query tile).
//
// Layout: 64 x 64 tiles, 256 threads = 8 warps; each product is split into 16 x 16 tiles
// that the warps take in turn (tile t to warp t % 8). Operand tiles are 16-bit in shared
// memory, rows padded by 8 elements (16 bytes: WMMA's ldm rule, and consecutive rows start
// in different banks); score tiles and output staging are float, rows padded by 4. Every
// array starts 32 bytes aligned (WMMA's rule for a tile pointer; tiles start at multiples
// of 16 rows and 16 columns, so each tile pointer keeps it); the dynamic buffer is only
// declared 16-byte aligned, so the kernels round its base up.
//
// Numerics: Q, K, V and dO stay in their 16-bit type (exact); P and dS are rounded to it
// as operands, the one difference from the FMA kernels (tests/cuda/test_cuda_attention.cpp
// states the bounds), and l sums the float P, so lse keeps float accuracy. The forward
// keeps O in shared memory as float: the online softmax rescales it by row, and which row
// a fragment element belongs to is unspecified. The backward keeps dK, dV and dQ in
// fragments (no row scaling), every sum in an order fixed by the shapes, no atomics: two
// runs give the same bits.
//
// In CI the WMMA calls run on the emulator's stand-in mma.h, which proves the documented
// fragment semantics, the tiling, masking and warp-uniform use, not the hardware's fragment
// layout or speed (tests/README.md). Next for speed: mma.sync with P kept in registers
// (FlashAttention-2), ldmatrix and cp.async pipelining, wgmma on sm_90.
#include <mma.h>

#include <atomic>

#include "attention.cuh"
#include "attention_tiles.cuh"
#include "common.cuh"

// bf16/fp16 WMMA needs sm_80: a device pass for an older GPU (CMAKE_CUDA_ARCHITECTURES=75,
// a T4) compiles the kernels below empty, and tc_compiled_for_device() keeps the launcher
// off them there (the host pass and the emulator see the bodies).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define FSDP_ATTENTION_TC 1
#else
#define FSDP_ATTENTION_TC 0
#pragma nv_diag_suppress 177  // the tile helpers the emptied kernels no longer use
#endif

namespace fsdp::cuda {
namespace {

using namespace attn;

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

// sS = scale Q K^T, its 16 x 16 tiles taken by the warps in turn; K^T is K's rows read as a
// column-major matrix_b.
template <int kD, typename M>
__device__ __forceinline__ void tc_scores(float* sS, const M* sQ, const M* sK, int ldh, float scale, int warp) {
  constexpr int kDSub = kD / 16;
  for (int t = warp; t < kTcSub * kTcSub; t += kTcWarps) {
    const int tr = t / kTcSub, tc = t % kTcSub;
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_k<wmma::row_major, wmma::col_major>(acc, sQ + tr * 16 * ldh, ldh, 16, sK + tc * 16 * ldh, ldh, 16, kDSub);
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale;  // every element alike: layout-free
    wmma::store_matrix_sync(sS + tr * 16 * kTcLdS + tc * 16, acc, kTcLdS, wmma::mem_row_major);
  }
}

// Row sr of the key tile at j0, by this lane (sp) of its kRowLanes: mask, running max and
// sum, O's row rescaled. P is rounded to 16 bits as the PV operand; l sums the float values,
// so lse keeps float accuracy for the backward.
template <typename T, int kD>
__device__ __forceinline__ void tc_softmax_row(const float* sS, typename MmaElem<T>::type* sP, float* sO, int ldo,
                                               int sr, int sp, int64_t j0, int64_t first_key, int64_t last_key,
                                               int64_t rows_k, float& m, float& l) {
  constexpr int kRowLanes = kThreads / kTcTile, kRowCols = kTcTile / kRowLanes;
  const float* row = sS + sr * kTcLdS;
  float tmax = -INFINITY;
  for (int c = sp * kRowCols; c < (sp + 1) * kRowCols; ++c)
    if (j0 + c <= last_key && j0 + c >= first_key && c < rows_k) tmax = row[c] > tmax ? row[c] : tmax;
  for (int off = kRowLanes / 2; off > 0; off >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, tmax, off);
    tmax = other > tmax ? other : tmax;
  }
  // -inf only while the row has seen no key of its document (attention.cu's FMA kernel).
  const float m_new = tmax > m ? tmax : m;
  const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
  float sum = 0.0f;
  for (int c = sp * kRowCols; c < (sp + 1) * kRowCols; ++c) {
    const float p = j0 + c <= last_key && j0 + c >= first_key && c < rows_k ? expf(row[c] - m_new) : 0.0f;
    sP[sr * kTcLdP + c] = MmaElem<T>::round(p);
    sum += p;
  }
  for (int off = kRowLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
  l = l * alpha + sum;
  m = m_new;
  for (int d = sp * (kD / kRowLanes); d < (sp + 1) * (kD / kRowLanes); ++d) sO[sr * ldo + d] *= alpha;
}

// sO += P V over the key sub-tiles that hold keys (P is 0 past rows_k).
template <int kD, typename M>
__device__ __forceinline__ void tc_add_pv(float* sO, int ldo, const M* sP, const M* sV, int ldh, int64_t rows_k,
                                          int warp) {
  constexpr int kDSub = kD / 16;
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
}

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) attention_fwd_tc_kernel(AttentionFwdArgs a) {
#if FSDP_ATTENTION_TC
  using M = typename MmaElem<T>::type;
  using L = TcFwdSmem<kD>;
  constexpr int ldh = L::ldh, ldo = L::ldo, kRowLanes = kThreads / kTcTile;
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
  const int64_t first_key = sr < rows_q ? doc_lo(a.doc_start, a.T, b, i0 + sr) : 0;  // row sr's document

  for (int64_t j0 = first_key_tile<kTcTile>(a.doc_start, a.T, b, i0); j0 < nk; j0 += kTcTile) {
    const int64_t rows_k = nk - j0 < kTcTile ? nk - j0 : kTcTile;
    load_kv_tiles<T, kTcTile>(a, sK, sV, ldh, b, j0, g, rows_k, kD);
    __syncthreads();

    tc_scores<kD>(sS, sQ, sK, ldh, scale, warp);
    __syncthreads();
    const int64_t last_key = a.q_pos + i0 + sr;  // rows past T see keys <= their position
    tc_softmax_row<T, kD>(sS, sP, sO, ldo, sr, sp, j0, first_key, last_key, rows_k, m, l);
    __syncthreads();
    tc_add_pv<kD>(sO, ldo, sP, sV, ldh, rows_k, warp);
    __syncthreads();
  }

  if (sp == 0) {
    sRow[sr] = 1.0f / l;
    if (a.lse != nullptr && sr < rows_q) static_cast<Stat<T>*>(a.lse)[(b * a.H + h) * a.T + i0 + sr] = m + logf(l);
  }
  __syncthreads();
  for (int i = tid; i < rows_q * kD; i += kThreads) {
    const int r = i / kD, d = i % kD;
    head_row_mut<T>(a.out, b, i0 + r, h)[d] = Elem<T>::store(sO[r * ldo + d] * sRow[r]);
  }
#else
  __trap();  // never launched: tc_compiled_for_device() is false where this pass runs
#endif
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
__device__ __forceinline__ void tc_probs_and_dscores(const TcBwdTiles<typename MmaElem<T>::type, kD>& sm,
                                                     const AttentionBwdArgs& a, int64_t b, int64_t i0,
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
    const bool valid = r < rows_q && c < rows_k && j0 + c <= i0 + r && j0 + c >= doc_lo(a.doc_start, a.T, b, i0 + r);
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
#if FSDP_ATTENTION_TC
  using M = typename MmaElem<T>::type;
  constexpr int ldh = TcBwdSmem<kD>::ldh, ldo = TcBwdSmem<kD>::ldo, kDSub = kD / 16;
  FSDP_DYNAMIC_SHARED(unsigned char, raw);
  const TcBwdTiles<M, kD> sm(raw);
  const int warp = int(threadIdx.x) / 32, strip = warp % kTcSub;
  const bool is_dv = warp >= kTcSub;
  const int64_t kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, G = a.H / a.KVH;
  const int64_t j0 = kt * kTcTile, rows_k = a.T - j0 < kTcTile ? a.T - j0 : kTcTile;
  const float scale = float(1.0 / sqrt(double(kD)));
  load_kv_tiles<T, kTcTile>(a, sm.k, sm.v, ldh, b, j0, g, rows_k, kD);

  FragAcc acc[kDSub];
  for (int c = 0; c < kDSub; ++c) wmma::fill_fragment(acc[c], 0.0f);
  for (int64_t h = g * G; h < (g + 1) * G; ++h)
    for (int64_t i0 = j0; i0 < a.T && sees_keys_before(a.doc_start, a.T, b, i0, j0 + rows_k); i0 += kTcTile) {
      const int64_t rows_q = a.T - i0 < kTcTile ? a.T - i0 : kTcTile;
      load_query_rows<T, kTcTile>(a, delta, sm.q, sm.dout, ldh, sm.lse, sm.delta, b, h, i0, rows_q);
      __syncthreads();
      tc_probs_and_dscores<T, kD>(sm, a, b, i0, rows_q, j0, rows_k, scale);
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
#else
  __trap();  // never launched: tc_compiled_for_device() is false where this pass runs
#endif
}

// One block per (query tile, h, b), as attention_bwd_dq_kernel. Warp w owns dQ's 16-row
// strip 16 (w % 4) and half (w / 4) of its columns: kD / 32 accumulator tiles.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) attention_bwd_dq_tc_kernel(AttentionBwdArgs a, const float* delta) {
#if FSDP_ATTENTION_TC
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
  for (int64_t j0 = first_key_tile<kTcTile>(a.doc_start, a.T, b, i0); j0 < i0 + rows_q; j0 += kTcTile) {
    const int64_t rows_k = a.T - j0 < kTcTile ? a.T - j0 : kTcTile;
    load_kv_tiles<T, kTcTile>(a, sm.k, sm.v, ldh, b, j0, g, rows_k, kD);
    __syncthreads();
    tc_probs_and_dscores<T, kD>(sm, a, b, i0, rows_q, j0, rows_k, scale);
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
#else
  __trap();  // never launched: tc_compiled_for_device() is false where this pass runs
#endif
}

// ---- launchers ----------------------------------------------------------------------------
std::atomic<uint64_t> g_tensor_core_launches{0};

// Shared memory: forward 70 KiB (D = 64) / 110 KiB (D = 128), backward 89 / 121 KiB, within
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

// The head dims with tensor-core kernels (kD / 32 accumulator tiles per warp in dQ).
constexpr bool tc_head_dim(int64_t D) { return D == 64 || D == 128; }

// Writes whether the code running on this device has the WMMA bodies (the SASS or PTX the
// driver picked for it was compiled for sm_80 or later).
__global__ void tc_probe_kernel(int* out) { *out = FSDP_ATTENTION_TC; }

// Asked once per device and process (one small launch and read-back), then cached.
bool tc_compiled_for_device() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  FSDP_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return false;
  if (const int k = known[device].load(std::memory_order_relaxed); k != 0) return k == 2;
  int* flag = nullptr;
  int host = 0;
  FSDP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)));
  FSDP_LAUNCH(tc_probe_kernel, 1, 1, 0, nullptr, flag);
  FSDP_CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
  FSDP_CUDA_CHECK(cudaFree(flag));
  known[device].store(host != 0 ? 2 : 1, std::memory_order_relaxed);
  return host != 0;
}

}  // namespace

bool attention_uses_tensor_cores(DType t, int64_t head_dim) {
  return (t == DType::BF16 || t == DType::F16) && tc_head_dim(head_dim) && tc_compiled_for_device();
}

uint64_t attention_tensor_core_launches() { return g_tensor_core_launches.load(std::memory_order_relaxed); }

namespace attn {

void launch_attention_forward_tc(DType t, const AttentionFwdArgs& a, cudaStream_t s) {
  if (t == DType::BF16) return a.D == 64 ? forward_tc<bf16, 64>(a, s) : forward_tc<bf16, 128>(a, s);
  if (t == DType::F16) return a.D == 64 ? forward_tc<f16, 64>(a, s) : forward_tc<f16, 128>(a, s);
}

void launch_attention_backward_tc(DType t, const AttentionBwdArgs& a, const float* delta, cudaStream_t s) {
  if (t == DType::BF16) return a.D == 64 ? backward_tc<bf16, 64>(a, delta, s) : backward_tc<bf16, 128>(a, delta, s);
  if (t == DType::F16) return a.D == 64 ? backward_tc<f16, 64>(a, delta, s) : backward_tc<f16, 128>(a, delta, s);
}

}  // namespace attn
}  // namespace fsdp::cuda
