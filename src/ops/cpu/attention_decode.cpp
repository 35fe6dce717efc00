// CPU decode-time attention against a KV cache (see include/fsdp/ops/attention_decode.h).
//
// First the T new key/value rows are copied into the cache at positions pos .. pos+T-1;
// then each (b, t, h) query row is one work item over its n = pos + t + 1 visible keys:
//   s_j = scale * q . K_j  (a lane-wise dot product),  m = max s,  p_j = exp(s_j - m),
//   out = (sum_j p_j V_j) / sum_j p_j
// Decoding has T = 1 and a single query row per head, where a GEMM call costs more than the
// D-long dot products it would replace, so the loops are written out; prefill (T > 1) runs
// the same loops, parallel over rows. Every output element is produced by one item in a
// fixed order of operations, so the bits do not depend on the thread count. The scores
// scratch is thread_local and only grows: no allocation after the first call on a cache.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "fsdp/ops/attention_decode.h"

namespace fsdp {
namespace {

// Below about this many multiply-adds the OpenMP team costs more than it saves (one
// decoded token of a small model); which thread runs an item never changes its bits.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;

// Fixed lanes: vectorisable without -ffast-math, summation order fixed by the code.
constexpr int kLanes = 16;

template <typename T>
T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  T s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) s[l] += a[j + l] * b[j + l];
  for (int l = 0; j < n; ++j, ++l) s[l] += a[j] * b[j];
  T r = 0;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  return r;
}

// Element (b, t, h, d) of a [B, T, heads, D] view with (heads, D) packed.
template <typename T>
struct Rows {
  T* p;
  int64_t s0, s1, s2;
  explicit Rows(const Tensor& x) : p(x.data<T>()), s0(x.stride(0)), s1(x.stride(1)), s2(x.stride(2)) {}
  T* at(int64_t i0, int64_t i1, int64_t i2) const { return p + i0 * s0 + i1 * s1 + i2 * s2; }
};

template <typename T>
void decode_impl(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                 const Tensor& v_cache, int64_t pos, const Tensor& out) {
  const int64_t B = q.size(0), Tn = q.size(1), H = q.size(2), D = q.size(3), KVH = k_new.size(2), G = H / KVH;
  const int64_t S = k_cache.size(2);
  const Rows<T> Q(q), O(out), Kn(k_new), Vn(v_new), Kc(k_cache), Vc(v_cache);  // caches as [B, KVH, S]
  const T scale = T(1.0 / std::sqrt(double(D)));
  const int64_t work = B * H * Tn * (pos + Tn) * D;
#pragma omp parallel if (work >= kMinParallelWork)
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < B * Tn * KVH; ++r) {
      const int64_t b = r / (Tn * KVH), t = r / KVH % Tn, g = r % KVH;
      std::memcpy(Kc.at(b, g, pos + t), Kn.at(b, t, g), size_t(D) * sizeof(T));
      std::memcpy(Vc.at(b, g, pos + t), Vn.at(b, t, g), size_t(D) * sizeof(T));
    }
    // (the loop's implicit barrier puts every new row in the cache before any read below)
    // Sized for the whole cache, not this call's rows: decoding grows the row one position
    // per step, and growing the buffer with it would reallocate every few steps.
    static thread_local std::vector<T> scores;
    if (scores.size() < size_t(S)) scores.resize(size_t(S));
    T* s = scores.data();
    // Dynamic: later rows see more keys; any assignment of items gives the same bits.
#pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < B * Tn * H; ++it) {
      const int64_t b = it / (Tn * H), t = it / H % Tn, h = it % H, g = h / G;
      const int64_t n = pos + t + 1;
      const T* qr = Q.at(b, t, h);
      const T* K = Kc.at(b, g, 0);
      const T* V = Vc.at(b, g, 0);
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        s[j] = scale * dot(qr, K + j * Kc.s2, D);
        m = s[j] > m ? s[j] : m;
      }
      T l = 0;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - m);
        l += s[j];
      }
      T* o = O.at(b, t, h);
      std::fill_n(o, D, T(0));
      for (int64_t j = 0; j < n; ++j) {
        const T p = s[j];
        const T* v = V + j * Vc.s2;
        for (int64_t d = 0; d < D; ++d) o[d] += p * v[d];
      }
      const T inv_l = T(1) / l;
      for (int64_t d = 0; d < D; ++d) o[d] *= inv_l;
    }
  }
}

void attention_decode_cpu(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t pos, const Tensor& out) {
  switch (q.dtype()) {
    case DType::F32: return decode_impl<float>(q, k_new, v_new, k_cache, v_cache, pos, out);
    case DType::F64: return decode_impl<double>(q, k_new, v_new, k_cache, v_cache, pos, out);
    default: FSDP_FAIL("attention_decode: the CPU backend supports float32 and float64, got q {}", q.str());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(attention_decode_stub, DeviceType::CPU, &attention_decode_cpu);

}  // namespace fsdp
