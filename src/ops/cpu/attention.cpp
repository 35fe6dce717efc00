// CPU causal GQA attention, flash-style in memory: only out [B,T,H,D] and lse [B,H,T] are
// stored; the [T, T] probabilities never exist as a whole.
//
// Forward, per (b, h, block of kQueryBlock query rows i):
//   S = scale * Q_i K^T         over keys 0 .. last row of the block (the causal triangle),
//                               one BLAS call per key tile into a per-thread row buffer
//   m = rowmax(S), P = exp(S - m) (masked above the diagonal), l = rowsum(P)
//   O_i = (P V) / l,  lse_i = m + log(l)
// Backward, per (b, kv head) — the loop over the query heads of the group sits inside, so
// dk/dv are summed by exactly one thread in a fixed order (no races, no thread-count
// dependence). Per query block i and key tile j (j <= i):
//   P = exp(scale * Q_i K_j^T - lse_i)    recomputed from lse, never stored
//   dP = dO_i V_j^T,   dS = P * (dP - delta_i) * scale,  delta_i = rowsum(dO_i * O_i)
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i,  dQ_i += dS K_j
// float32 runs on cblas_sgemm, float64 (the finite-difference reference) on cblas_dgemm.
// With documents (Note [Document masking] in attention.h) a query block's key range starts
// at its first query's document start instead of 0, and each row's keys before its own
// document start are masked like those above the diagonal.
//
// Note [BLAS calls inside OpenMP regions]: the GEMMs run inside OpenMP loops over heads,
// so each must run on the calling thread. OpenBLAS (pthread build) does so for
// M*N*K <= 4 * 65536; a bigger call made from two OpenMP threads at once queues on
// OpenBLAS's own pool and was measured 5-10x slower than the two running side by side.
// Tiles are therefore sized so that M*N*K stays within that bound for D <= 128.
//
// Note [GEMM orientation]: OpenBLAS runs GEMMs this small in its "small matrix" kernels
// (no packing) for row-major NN and TN, but not for NT (A @ B^T) with more than 1200
// outputs, which goes through the packing path and measured ~2x slower for these tiles.
// So Q K^T and dO V^T are computed as Q @ (K^T), dO @ (V^T) from transposed copies.
//
// Determinism: every output element is produced by one work item with a fixed sequence
// of operations that does not depend on which thread runs it, so results are bitwise
// the same for any OpenMP thread count. Scratch is thread_local and only grows: after the
// first call with a given size nothing is allocated.
#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fsdp/ops/attention.h"

namespace fsdp {
namespace {

constexpr int64_t kQueryBlock = 64;
// Below about this many multiply-adds (B*H*T*T*D) the OpenMP team costs more than it
// saves; which thread runs an item never changes its bits, so this is only about speed.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;
constexpr int64_t kBlasSerialMNK = 4 * 65536;  // See Note [BLAS calls inside OpenMP regions]

// Key tile width: the widest multiple of 16 in [16, 256] keeping kQueryBlock * Bk * D
// within the single-thread BLAS bound (64 for D = 64, 32 for D = 128).
int64_t key_block(int64_t D) {
  const int64_t bk = kBlasSerialMNK / (kQueryBlock * D) / 16 * 16;
  return std::clamp<int64_t>(bk, 16, 256);
}

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// exp for softmax arguments (x <= ~0), written so that GCC vectorises the loops that call
// it: with libm's expf (a call per element) forward + backward took 1.45x as long.
// Cephes' expf: x = n*ln2 + r with |r| <= ln2/2, exp(r) by its degree-7 polynomial
// (measured: within 1.4 ulp of exp over every float in [-87, 1]), times 2^n built in the
// exponent bits. Results below 2^-126 (x < -87)
// flush to 0, which no softmax sum can notice; x is capped at 88 (never reached here).
inline float softmax_exp(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;  // ln2 split in two so that n * hi is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((int32_t(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}
// float64 is the finite-difference reference: exact libm exp, speed does not matter.
inline double softmax_exp(double x) { return std::exp(x); }

// Reductions over fixed lanes: vectorisable without -ffast-math, and the summation order
// is fixed by the code rather than by the compiler or the thread count.
constexpr int kLanes = 16;

template <typename T>
T row_max(const T* x, int64_t n) {
  T m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  for (int l = 0; j < n; ++j, ++l) m[l] = x[j] > m[l] ? x[j] : m[l];
  T r = m[0];
  for (int l = 1; l < kLanes; ++l) r = m[l] > r ? m[l] : r;
  return r;
}

// x[j] = exp(x[j] - m) for j < n; returns the sum of the new values.
template <typename T>
T exp_sub_sum(T* x, int64_t n, T m) {
  T s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T e = softmax_exp(x[j + l] - m);
      x[j + l] = e;
      s[l] += e;
    }
  for (int l = 0; j < n; ++j, ++l) {
    const T e = softmax_exp(x[j] - m);
    x[j] = e;
    s[l] += e;
  }
  T r = 0;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  return r;
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) s[l] += a[j + l] * b[j + l];
  for (int l = 0; j < n; ++j, ++l) s[l] += a[j] * b[j];
  T r = 0;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  return r;
}

// Per-thread scratch that only grows (nothing allocated once the sizes have been seen).
template <typename T, int Slot>
T* scratch(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Raw pointers and row strides of a [B, T, heads, D] tensor: element (b, t, h, d) is at
// p[b*s0 + t*s1 + h*D + d]; rows of one head are s1 apart, the BLAS leading dimension.
template <typename T>
struct Heads {
  T* p;
  int64_t s0, s1, D;
  explicit Heads(const Tensor& x) : p(x.data<T>()), s0(x.stride(0)), s1(x.stride(1)), D(x.size(3)) {}
  T* at(int64_t b, int64_t t, int64_t h) const { return p + b * s0 + t * s1 + h * D; }
};

// dst[d * ld + t] = rows[t * s1 + d] for t < n, d < D: the transposed copy of n rows of one
// head, so that products with K^T and V^T are NN GEMMs (see Note [GEMM orientation]).
// In 16 x 16 blocks, so both the strided reads and the strided writes stay in L1.
template <typename T>
void transpose_rows(const T* rows, int64_t s1, int64_t n, int64_t D, T* dst, int64_t ld) {
  constexpr int64_t kB = 16;
  for (int64_t t0 = 0; t0 < n; t0 += kB)
    for (int64_t d0 = 0; d0 < D; d0 += kB) {
      const int64_t t1 = std::min(n, t0 + kB), d1 = std::min(D, d0 + kB);
      for (int64_t d = d0; d < d1; ++d)
        for (int64_t t = t0; t < t1; ++t) dst[d * ld + t] = rows[t * s1 + d];
    }
}

// Row length of the [*, T] scratch buffers: a multiple of 16 floats (64 bytes), but not of
// 128, since rows a power of two apart share cache sets (measured ~5% at T = 256).
int64_t padded_ld(int64_t Tn) {
  const int64_t ld = (Tn + 15) / 16 * 16;
  return ld % 128 == 0 ? ld + 16 : ld;
}

// Row b's document starts (Note [Document masking]); null: causal over the whole row,
// every token's document starting at 0.
struct DocStarts {
  const int32_t* p = nullptr;
  int64_t T = 0;
  explicit DocStarts(const Tensor& d, int64_t Tn) : p(d.defined() ? d.data<int32_t>() : nullptr), T(Tn) {}
  int64_t at(int64_t b, int64_t t) const { return p != nullptr ? p[b * T + t] : 0; }
};

template <typename T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const Tensor& doc_start) {
  const int64_t B = q.size(0), Tn = q.size(1), H = q.size(2), D = q.size(3), KVH = k.size(2), G = H / KVH;
  const Heads<T> Q(q), K(k), V(v), O(out);
  const DocStarts docs(doc_start, Tn);
  T* L = lse.data<T>();
  const T scale = T(1.0 / std::sqrt(double(D)));
  const int64_t Bk = key_block(D), nqb = (Tn + kQueryBlock - 1) / kQueryBlock;
  const int64_t ld = padded_ld(Tn);
  const int64_t items = B * H * nqb;
  // K^T of every (b, kv head), shared by all items: the calling thread's scratch, the size
  // of k. Transposed once rather than per item, where it took ~20% of the forward.
  T* KT_all = scratch<T, 3>(size_t(B * KVH * D * ld));
#pragma omp parallel if (B * H * Tn * Tn * D >= kMinParallelWork)
  {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * KVH; ++bh)
      transpose_rows(K.at(bh / KVH, 0, bh % KVH), K.s1, Tn, D, KT_all + bh * D * ld, ld);
    // (the implicit barrier of the loop above orders it before every read below)
    T* S = scratch<T, 0>(size_t(kQueryBlock * ld));  // scores of one query block
    T* inv_l = scratch<T, 2>(size_t(kQueryBlock));
    // Dynamic: later query blocks cost more (longer causal rows); any assignment of items
    // to threads gives the same bits.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t qb = nqb - 1 - it % nqb;  // longest rows first for load balance
      const int64_t b = it / nqb / H, h = it / nqb % H, kvh = h / G;
      const int64_t i0 = qb * kQueryBlock, bq = std::min(kQueryBlock, Tn - i0), nk = i0 + bq;
      const T* Qi = Q.at(b, i0, h);
      T* Oi = O.at(b, i0, h);
      T* Li = L + (b * H + h) * Tn + i0;
      const T* KT = KT_all + (b * KVH + kvh) * D * ld;
      // Keys before the block's first document are seen by none of its queries: skipped.
      const int64_t k0 = docs.at(b, i0);
      for (int64_t j0 = k0; j0 < nk; j0 += Bk)
        gemm(false, false, bq, std::min(Bk, nk - j0), D, scale, Qi, Q.s1, KT + j0, ld, T(0), S + j0, ld);
      for (int64_t r = 0; r < bq; ++r) {
        T* Sr = S + r * ld;
        const int64_t lo = docs.at(b, i0 + r), n = i0 + r + 1;  // keys lo..i visible to query i
        const T m = row_max(Sr + lo, n - lo);
        const T l = exp_sub_sum(Sr + lo, n - lo, m);
        std::fill(Sr + k0, Sr + lo, T(0));
        std::fill(Sr + n, Sr + nk, T(0));
        Li[r] = m + std::log(l);
        inv_l[r] = T(1) / l;
      }
      for (int64_t j0 = k0; j0 < nk; j0 += Bk)
        gemm(false, false, bq, D, std::min(Bk, nk - j0), T(1), S + j0, ld, V.at(b, j0, kvh), V.s1,
             T(j0 == k0 ? 0 : 1), Oi, O.s1);
      for (int64_t r = 0; r < bq; ++r) {
        T* o = Oi + r * O.s1;
        for (int64_t d = 0; d < D; ++d) o[d] *= inv_l[r];
      }
    }
  }
}

template <typename T>
void backward_impl(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& doc_start) {
  const int64_t B = q.size(0), Tn = q.size(1), H = q.size(2), D = q.size(3), KVH = k.size(2), G = H / KVH;
  const Heads<T> Q(q), K(k), V(v), O(out), dO(dout), dQ(dq), dK(dk), dV(dv);
  const DocStarts docs(doc_start, Tn);
  const T* L = lse.data<T>();
  const T scale = T(1.0 / std::sqrt(double(D)));
  const int64_t Bk = key_block(D), nqb = (Tn + kQueryBlock - 1) / kQueryBlock;
  const int64_t ld = padded_ld(Tn);
  const int64_t items = B * KVH;
#pragma omp parallel if (B * H * Tn * Tn * D >= kMinParallelWork)
  {
    T* KT = scratch<T, 0>(size_t(D * ld));  // K^T and V^T of this kv head
    T* VT = scratch<T, 1>(size_t(D * ld));
    T* P = scratch<T, 2>(size_t(kQueryBlock * Bk));   // probabilities of one tile
    T* dS = scratch<T, 3>(size_t(kQueryBlock * Bk));  // dP, then dS in place
    T* delta = scratch<T, 4>(size_t(kQueryBlock));
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t b = it / KVH, kvh = it % KVH;
      transpose_rows(K.at(b, 0, kvh), K.s1, Tn, D, KT, ld);
      transpose_rows(V.at(b, 0, kvh), V.s1, Tn, D, VT, ld);
      for (int64_t t = 0; t < Tn; ++t) {
        std::fill_n(dK.at(b, t, kvh), D, T(0));
        std::fill_n(dV.at(b, t, kvh), D, T(0));
      }
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const int64_t i0 = qb * kQueryBlock, bq = std::min(kQueryBlock, Tn - i0), nk = i0 + bq;
          const T* Qi = Q.at(b, i0, h);
          const T* dOi = dO.at(b, i0, h);
          const T* Li = L + (b * H + h) * Tn + i0;
          T* dQi = dQ.at(b, i0, h);
          for (int64_t r = 0; r < bq; ++r) delta[r] = dot(dOi + r * dO.s1, O.at(b, i0 + r, h), D);
          const int64_t k0 = docs.at(b, i0);  // keys before it: no query of the block sees them
          for (int64_t j0 = k0; j0 < nk; j0 += Bk) {
            const int64_t bk = std::min(Bk, nk - j0);
            gemm(false, false, bq, bk, D, scale, Qi, Q.s1, KT + j0, ld, T(0), P, Bk);  // S
            gemm(false, false, bq, bk, D, T(1), dOi, dO.s1, VT + j0, ld, T(0), dS, Bk);  // dP
            for (int64_t r = 0; r < bq; ++r) {
              T* Pr = P + r * Bk;
              T* dSr = dS + r * Bk;
              const T lr = Li[r], dr = delta[r];
              // Visible: keys lo <= j <= i (its document, causal).
              const int64_t nvalid = std::clamp<int64_t>(i0 + r - j0 + 1, 0, bk);
              const int64_t first = std::clamp<int64_t>(docs.at(b, i0 + r) - j0, 0, nvalid);
              std::fill(Pr, Pr + first, T(0));
              std::fill(dSr, dSr + first, T(0));
              for (int64_t c = first; c < nvalid; ++c) {
                const T p = softmax_exp(Pr[c] - lr);
                Pr[c] = p;
                dSr[c] = p * (dSr[c] - dr) * scale;
              }
              std::fill(Pr + nvalid, Pr + bk, T(0));
              std::fill(dSr + nvalid, dSr + bk, T(0));
            }
            gemm(true, false, bk, D, bq, T(1), P, Bk, dOi, dO.s1, T(1), dV.at(b, j0, kvh), dV.s1);
            gemm(true, false, bk, D, bq, T(1), dS, Bk, Qi, Q.s1, T(1), dK.at(b, j0, kvh), dK.s1);
            gemm(false, false, bq, D, bk, T(1), dS, Bk, K.at(b, j0, kvh), K.s1, T(j0 == k0 ? 0 : 1), dQi, dQ.s1);
          }
        }
      }
    }
  }
}

void attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           const Tensor& doc_start) {
  switch (q.dtype()) {
    case DType::F32: return forward_impl<float>(q, k, v, out, lse, doc_start);
    case DType::F64: return forward_impl<double>(q, k, v, out, lse, doc_start);
    default: FSDP_FAIL("attention_forward: the CPU backend supports float32 and float64, got q {}", q.str());
  }
}

void attention_backward_cpu(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            const Tensor& doc_start) {
  switch (q.dtype()) {
    case DType::F32: return backward_impl<float>(dout, q, k, v, out, lse, dq, dk, dv, doc_start);
    case DType::F64: return backward_impl<double>(dout, q, k, v, out, lse, dq, dk, dv, doc_start);
    default: FSDP_FAIL("attention_backward: the CPU backend supports float32 and float64, got q {}", q.str());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(attention_forward_stub, DeviceType::CPU, &attention_forward_cpu);
FSDP_REGISTER_DISPATCH(attention_backward_stub, DeviceType::CPU, &attention_backward_cpu);

}  // namespace fsdp
