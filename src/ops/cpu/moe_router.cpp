// CPU MoE router: softmax, top-k (of the probabilities, plus the routing bias when there is
// one) and renormalisation per token (rows in parallel), the
// routing statistics (serial sums in token order), and the backward. Every value is
// computed in double and rounded once into its stat-dtype output, so float32 results are
// within one rounding of the exact ones and independent of the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "unsupported.h"
#include "fsdp/ops/moe_router.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

// Experts of row `p` (E values) by decreasing probability, ties by increasing index: the
// first k of a stable sort, as a partial selection.
void top_k(const double* p, int64_t e, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) idx[size_t(i)] = int32_t(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
  });
  std::copy_n(idx.begin(), k, out);
}

template <typename T, typename S>
void forward_impl(const Tensor& logits_t, int64_t k, const Tensor& probs_t, const Tensor& lse_t,
                  const Tensor& expert_t, const Tensor& weight_t, const Tensor& bias_t) {
  const int64_t n = logits_t.size(0), e = logits_t.size(1), ls = logits_t.stride(0);
  const T* logits = logits_t.data<T>();
  S* probs = probs_t.data<S>();
  S* lse = lse_t.data<S>();
  int32_t* expert = expert_t.data<int32_t>();
  S* weight = weight_t.data<S>();
  const float* bias = bias_t.defined() ? bias_t.data<float>() : nullptr;
#pragma omp parallel for schedule(static) if (n * e >= kMinParallelWork)
  for (int64_t t = 0; t < n; ++t) {
    const T* x = logits + t * ls;
    double m = double(x[0]);
    for (int64_t i = 1; i < e; ++i) m = std::max(m, double(x[i]));
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += std::exp(double(x[i]) - m);
    lse[t] = S(m + std::log(sum));
    // Selection on the stored (rounded) probabilities, as transformers takes top-k of its
    // float32 softmax.
    std::vector<double> p(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) {
      probs[t * e + i] = S(std::exp(double(x[i]) - m) / sum);
      p[size_t(i)] = double(probs[t * e + i]);
    }
    int32_t* chosen = expert + t * k;
    if (bias != nullptr) {
      // Auxiliary-loss-free balancing: the bias moves the choice, not the weights below.
      std::vector<double> score(static_cast<size_t>(e));
      for (int64_t i = 0; i < e; ++i) score[size_t(i)] = p[size_t(i)] + double(bias[i]);
      top_k(score.data(), e, k, chosen);
    } else {
      top_k(p.data(), e, k, chosen);
    }
    double selected = 0;
    for (int64_t j = 0; j < k; ++j) selected += p[size_t(chosen[j])];
    for (int64_t j = 0; j < k; ++j) weight[t * k + j] = S(p[size_t(chosen[j])] / selected);
  }
}

template <typename S>
void stats_impl(const Tensor& probs_t, const Tensor& expert_t, const Tensor& lse_t, const Tensor& prob_sum_t,
                const Tensor& count_t, const Tensor& lse_sq_t) {
  const int64_t n = probs_t.size(0), e = probs_t.size(1), k = expert_t.size(1);
  const S* probs = probs_t.data<S>();
  const int32_t* expert = expert_t.data<int32_t>();
  const S* lse = lse_t.data<S>();
  std::vector<double> sums(static_cast<size_t>(e), 0.0);
  std::vector<int32_t> counts(static_cast<size_t>(e), 0);
  double lse_sq = 0;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < e; ++i) sums[size_t(i)] += double(probs[t * e + i]);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t x = expert[t * k + j];
      FSDP_CHECK(x >= 0 && x < e, "moe_router_stats: expert {} at row {} is outside [0, {})", x, t, e);
      ++counts[size_t(x)];
    }
    lse_sq += double(lse[t]) * double(lse[t]);
  }
  for (int64_t i = 0; i < e; ++i) {
    prob_sum_t.data<S>()[i] = S(sums[size_t(i)]);
    count_t.data<int32_t>()[i] = counts[size_t(i)];
  }
  lse_sq_t.data<S>()[0] = S(lse_sq);
}

template <typename T, typename S>
void backward_impl(const Tensor& dweight_t, const Tensor& probs_t, const Tensor& lse_t, const Tensor& expert_t,
                   const Tensor& weight_t, const Tensor& aux_t, double z_scale, const Tensor& dlogits_t) {
  const int64_t n = probs_t.size(0), e = probs_t.size(1), k = expert_t.size(1), ds = dlogits_t.stride(0);
  const S* dweight = dweight_t.defined() ? dweight_t.data<S>() : nullptr;
  const S* probs = probs_t.data<S>();
  const S* lse = lse_t.data<S>();
  const int32_t* expert = expert_t.data<int32_t>();
  const S* weight = weight_t.data<S>();
  const S* aux = aux_t.defined() ? aux_t.data<S>() : nullptr;
  T* dlogits = dlogits_t.data<T>();
#pragma omp parallel for schedule(static) if (n * e >= kMinParallelWork)
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> g(static_cast<size_t>(e), 0.0);
    for (int64_t i = 0; i < e; ++i) g[size_t(i)] = aux != nullptr ? double(aux[i]) : 0.0;
    if (dweight != nullptr) {
      double selected = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) {
        selected += double(probs[t * e + expert[t * k + j]]);
        dot += double(dweight[t * k + j]) * double(weight[t * k + j]);
      }
      for (int64_t j = 0; j < k; ++j) g[size_t(expert[t * k + j])] += (double(dweight[t * k + j]) - dot) / selected;
    }
    double pg = 0;
    for (int64_t i = 0; i < e; ++i) pg += double(probs[t * e + i]) * g[size_t(i)];
    const double z = 2.0 * z_scale * double(lse[t]);
    for (int64_t i = 0; i < e; ++i) {
      const double p = double(probs[t * e + i]);
      dlogits[t * ds + i] = T(p * (g[size_t(i)] - pg) + z * p);
    }
  }
}

void forward_cpu(const Tensor& logits, int64_t k, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                 const Tensor& weight, const Tensor& bias) {
  switch (logits.dtype()) {
    case DType::F32: return forward_impl<float, float>(logits, k, probs, lse, expert, weight, bias);
    case DType::F64: return forward_impl<double, double>(logits, k, probs, lse, expert, weight, bias);
    default: cpu::unsupported("moe_router_forward", logits.dtype());
  }
}

void stats_cpu(const Tensor& probs, const Tensor& expert, const Tensor& lse, const Tensor& prob_sum,
               const Tensor& count, const Tensor& lse_sq) {
  if (probs.dtype() == DType::F64) return stats_impl<double>(probs, expert, lse, prob_sum, count, lse_sq);
  stats_impl<float>(probs, expert, lse, prob_sum, count, lse_sq);
}

void backward_cpu(const Tensor& dweight, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                  const Tensor& weight, const Tensor& aux, double z_scale, const Tensor& dlogits) {
  switch (dlogits.dtype()) {
    case DType::F32: return backward_impl<float, float>(dweight, probs, lse, expert, weight, aux, z_scale, dlogits);
    case DType::F64: return backward_impl<double, double>(dweight, probs, lse, expert, weight, aux, z_scale, dlogits);
    default: cpu::unsupported("moe_router_backward", dlogits.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(moe_router_forward_stub, DeviceType::CPU, &forward_cpu);
FSDP_REGISTER_DISPATCH(moe_router_stats_stub, DeviceType::CPU, &stats_cpu);
FSDP_REGISTER_DISPATCH(moe_router_backward_stub, DeviceType::CPU, &backward_cpu);

}  // namespace fsdp
