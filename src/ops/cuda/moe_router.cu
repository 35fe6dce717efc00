// The MoE router on the GPU, the CPU's math (src/ops/cpu/moe_router.cpp; see
// fsdp/ops/moe_router.h): one thread per token for the softmax, the top-k selection and
// the backward (E is small: 8 for Mixtral); the statistics as one block per expert (and
// one for the sum of lse^2), each summing its column in a fixed per-thread assignment and a
// fixed tree, in double. No atomics: the same bits on every run.
//
// Compute type: double for every dtype, as the CPU: the row loops are a few dozen
// operations per token (E = 8), nothing next to the expert GEMMs, and in double the
// float32 probabilities, weights and gradients are the CPU's up to exp/log's last ulp and
// FMA contraction, and the chosen experts are the CPU's.
#include "common.cuh"
#include "moe_router.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kStatThreads = 256;

// The lowest expert index not among chosen[0..j): what a pass picks when NaN
// probabilities leave nothing ranked after the previous pick, so the output stays a set of
// distinct valid indices whatever the logits.
__device__ int64_t first_unchosen(const int32_t* chosen, int64_t j) {
  for (int64_t i = 0;; ++i) {
    bool taken = false;
    for (int64_t q = 0; q < j; ++q) taken = taken || chosen[q] == int32_t(i);
    if (!taken) return i;
  }
}

// S: the stat type (float or double). The CPU's loop line for line, in double: the
// selection then sees the CPU's probabilities (up to exp's last double ulp), so the GPU
// chooses the experts the CPU does even between nearly equal logits.
template <typename T, typename S>
__global__ void router_fwd_kernel(const T* logits, int64_t ls, int64_t n, int64_t e, int64_t k, const float* bias,
                                  S* probs, S* lse, int32_t* expert, S* weight) {
  using E = Elem<T>;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const T* x = logits + t * ls;
  double m = double(E::load(x[0]));
  for (int64_t i = 1; i < e; ++i) m = fmax(m, double(E::load(x[i])));
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += exp(double(E::load(x[i])) - m);
  lse[t] = S(m + log(sum));
  S* p = probs + t * e;
  for (int64_t i = 0; i < e; ++i) p[i] = S(exp(double(E::load(x[i])) - m) / sum);
  // Top-k by k passes over the row's scores, O(k E): the stored probabilities (exactly
  // in double), plus the routing bias when there is one, as the CPU forms them (adding 0.0
  // instead changes no comparison). Experts are totally ordered by (score down, index up),
  // and pass j takes the first maximum among those ranked after pick j-1, so ties go to
  // the lower index. The weights below are of the unbiased probabilities.
  auto score = [&](int64_t i) { return double(p[i]) + (bias != nullptr ? double(bias[i]) : 0.0); };
  int32_t* chosen = expert + t * k;
  double selected = 0;
  double prev_s = 0;
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    double best_s = 0;
    for (int64_t i = 0; i < e; ++i) {
      const double s = score(i);
      const bool after_prev = prev < 0 || s < prev_s || (s == prev_s && i > prev);
      if (after_prev && (best < 0 || s > best_s)) {
        best = i;
        best_s = s;
      }
    }
    if (best < 0) best = first_unchosen(chosen, j);  // only with NaN probabilities
    chosen[j] = int32_t(best);
    selected += double(p[best]);
    prev = best;
    prev_s = score(best);
  }
  for (int64_t j = 0; j < k; ++j) weight[t * k + j] = S(double(p[chosen[j]]) / selected);
}

// Block b < e: prob_sum[b] and count[b]; block e: the sum of lse^2.
template <typename S>
__global__ void router_stats_kernel(const S* probs, const int32_t* expert, const S* lse, int64_t n, int64_t e,
                                    int64_t k, S* prob_sum, int32_t* count, S* lse_sq_sum) {
  __shared__ double scratch[32];
  __shared__ double hit_scratch[32];
  const int64_t b = blockIdx.x;
  double acc = 0, hits = 0;  // counts in double: exact below 2^53
  if (b < e) {
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
      acc += double(probs[t * e + b]);
      for (int64_t j = 0; j < k; ++j) hits += expert[t * k + j] == int32_t(b) ? 1 : 0;
    }
  } else {
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) acc += double(lse[t]) * double(lse[t]);
  }
  const double total = block_sum(acc, scratch);
  const double total_hits = block_sum(hits, hit_scratch);
  if (threadIdx.x != 0) return;
  if (b < e) {
    prob_sum[b] = S(total);
    count[b] = int32_t(total_hits);
  } else {
    lse_sq_sum[0] = S(total);
  }
}

// In double, as the CPU: g_e = aux_e + c_e, with c nonzero only at the k chosen experts
// (distinct), found by a scan of the row's k choices instead of the CPU's row vector.
template <typename T, typename S>
__global__ void router_bwd_kernel(const S* dweight, const S* probs, const S* lse, const int32_t* expert,
                                  const S* weight, const S* aux, double z_scale, T* dlogits, int64_t ds, int64_t n,
                                  int64_t e, int64_t k) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const S* p = probs + t * e;
  const int32_t* chosen = expert + t * k;
  double selected = 0, dot = 0;
  if (dweight != nullptr) {
    for (int64_t j = 0; j < k; ++j) {
      selected += double(p[chosen[j]]);
      dot += double(dweight[t * k + j]) * double(weight[t * k + j]);
    }
  }
  auto g_of = [&](int64_t i) -> double {
    const double a = aux != nullptr ? double(aux[i]) : 0.0;
    if (dweight == nullptr) return a;
    for (int64_t j = 0; j < k; ++j)
      if (chosen[j] == int32_t(i)) return a + (double(dweight[t * k + j]) - dot) / selected;
    return a;
  };
  double pg = 0;
  for (int64_t i = 0; i < e; ++i) pg += double(p[i]) * g_of(i);
  const double z = 2.0 * z_scale * double(lse[t]);
  for (int64_t i = 0; i < e; ++i) {
    const double pi = double(p[i]);
    dlogits[t * ds + i] = Elem<T>::from_double(pi * (g_of(i) - pg) + z * pi);
  }
}

}  // namespace

bool moe_router_supports(DType t) { return is_floating(t); }

void launch_moe_router_forward(DType t, const void* logits, int64_t ls, int64_t n, int64_t e, int64_t k,
                               const float* bias, void* probs, void* lse, int32_t* expert, void* weight,
                               cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    FSDP_LAUNCH((router_fwd_kernel<T, S>), blocks_for(n, kRowThreads), kRowThreads, 0, stream,
                static_cast<const T*>(logits), ls, n, e, k, bias, static_cast<S*>(probs), static_cast<S*>(lse), expert,
                static_cast<S*>(weight));
  });
}

void launch_moe_router_stats(DType stat, const void* probs, const int32_t* expert, const void* lse, int64_t n,
                             int64_t e, int64_t k, void* prob_sum, int32_t* count, void* lse_sq_sum,
                             cudaStream_t stream) {
  auto go = [&](auto tag) {
    using S = decltype(tag);
    FSDP_LAUNCH((router_stats_kernel<S>), unsigned(e + 1), kStatThreads, 0, stream, static_cast<const S*>(probs),
                expert, static_cast<const S*>(lse), n, e, k, static_cast<S*>(prob_sum), count,
                static_cast<S*>(lse_sq_sum));
  };
  if (stat == DType::F64) return go(double{});
  go(float{});
}

void launch_moe_router_backward(DType t, const void* dweight, const void* probs, const void* lse,
                                const int32_t* expert, const void* weight, const void* aux_grad, double z_scale,
                                void* dlogits, int64_t ds, int64_t n, int64_t e, int64_t k, cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    FSDP_LAUNCH((router_bwd_kernel<T, S>), blocks_for(n, kRowThreads), kRowThreads, 0, stream,
                static_cast<const S*>(dweight), static_cast<const S*>(probs), static_cast<const S*>(lse), expert,
                static_cast<const S*>(weight), static_cast<const S*>(aux_grad), z_scale, static_cast<T*>(dlogits), ds,
                n, e, k);
  });
}

}  // namespace fsdp::cuda
