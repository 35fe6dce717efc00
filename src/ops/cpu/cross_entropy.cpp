// CPU softmax cross-entropy fused with its gradient (the llm.c way: no second [N, V]).
//
//   m = max_v x[v],  S = sum_v exp(x[v] - m)           (max subtraction: no overflow)
//   loss     = log S + m - x[t]                         (computed in double)
//   dlogits  = (exp(x - m) / S - onehot(t)) * grad_scale
//
// Layout: logits / dlogits [N, V] with packed rows and their own row strides; targets [N]
// int32 / int64; losses [N] in T. Rows are independent and split across threads.
//
// In place: the row's target logit is read first; then pass 2 writes e = exp(x - m) over
// dlogits (reading each x before overwriting it) while summing S; pass 3 scales e by
// grad_scale / S and subtracts grad_scale at the target. So dlogits may be logits itself.
// An ignored row gets loss 0 and, when dlogits is given, a zero gradient row. Targets are
// validated serially before any row is touched, so an error leaves the logits intact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lanes.h"
#include "unsupported.h"
#include "fsdp/ops/cross_entropy.h"

namespace fsdp {

using cpu::kLanes;
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

template <typename T>
T row_max(const T* x, int64_t v) {
  T acc[kLanes];
  std::fill_n(acc, kLanes, -std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= v; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], x[i + l]);
  for (int l = 0; i < v; ++i, ++l) acc[l] = std::max(acc[l], x[i]);
  T m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, acc[l]);
  return m;
}

// sum_v exp(x[v] - m); when e is given, also stores each exp there (e may alias x).
template <typename T>
double exp_sum(const T* x, T* e, int64_t v, T m) {
  double acc[kLanes] = {};
  int64_t i = 0;
  if (e == nullptr) {
    for (; i + kLanes <= v; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += double(std::exp(x[i + l] - m));
    for (int l = 0; i < v; ++i, ++l) acc[l] += double(std::exp(x[i] - m));
  } else {
    for (; i + kLanes <= v; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const T ev = std::exp(x[i + l] - m);
        e[i + l] = ev;
        acc[l] += double(ev);
      }
    for (int l = 0; i < v; ++i, ++l) {
      const T ev = std::exp(x[i] - m);
      e[i] = ev;
      acc[l] += double(ev);
    }
  }
  return cpu::combine_lanes(acc);
}

template <typename I>
void check_targets(const I* targets, int64_t n, int64_t v, int64_t ignore_index) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = int64_t(targets[i]);
    FSDP_CHECK(t == ignore_index || (t >= 0 && t < v),
               "target {} at row {} is outside [0, {}) and is not ignore_index ({})", t, i, v, ignore_index);
  }
}

template <typename T, typename I>
void cross_entropy_impl(const Tensor& logits_t, const Tensor& targets_t, const Tensor& losses_t,
                        const Tensor& dlogits_t, double grad_scale, int64_t ignore_index) {
  const int64_t n = logits_t.size(0), v = logits_t.size(1);
  const I* targets = targets_t.data<I>();
  check_targets(targets, n, v, ignore_index);
  const T* logits = logits_t.data<T>();
  T* losses = losses_t.data<T>();
  const int64_t ls = logits_t.stride(0);
  const bool backward = dlogits_t.defined();
  T* dlogits = backward ? dlogits_t.data<T>() : nullptr;
  const int64_t ds = backward ? dlogits_t.stride(0) : 0;
  const T scale = T(grad_scale);

#pragma omp parallel for schedule(static) if (n * v >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T* x = logits + i * ls;
    const int64_t t = int64_t(targets[i]);
    if (t == ignore_index) {
      losses[i] = T(0);
      if (backward) std::fill_n(dlogits + i * ds, v, T(0));
      continue;
    }
    const T xt = x[t];
    const T m = row_max(x, v);
    if (!backward) {
      const double s = exp_sum<T>(x, nullptr, v, m);
      losses[i] = T(std::log(s) + (double(m) - double(xt)));
      continue;
    }
    T* d = dlogits + i * ds;
    const double s = exp_sum<T>(x, d, v, m);
    losses[i] = T(std::log(s) + (double(m) - double(xt)));
    const T f = T(grad_scale / s);
    for (int64_t j = 0; j < v; ++j) d[j] *= f;
    d[t] -= scale;
  }
}

void cross_entropy_cpu(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
                       double grad_scale, int64_t ignore_index) {
  const bool i64 = targets.dtype() == DType::I64;
  switch (logits.dtype()) {
    case DType::F32:
      return i64 ? cross_entropy_impl<float, int64_t>(logits, targets, losses, dlogits, grad_scale, ignore_index)
                 : cross_entropy_impl<float, int32_t>(logits, targets, losses, dlogits, grad_scale, ignore_index);
    case DType::F64:
      return i64 ? cross_entropy_impl<double, int64_t>(logits, targets, losses, dlogits, grad_scale, ignore_index)
                 : cross_entropy_impl<double, int32_t>(logits, targets, losses, dlogits, grad_scale, ignore_index);
    default: cpu::unsupported("cross_entropy", logits.dtype());
  }
}

// ---- Vocabulary-parallel: the shard's statistics, then the merge (cross_entropy.h) ----
// The same row max and exp sum as the whole-row op, so one shard of T == 1 is the whole
// op's arithmetic; the merge rescales each shard's sum by exp(m_r - M) in double.

template <typename T, typename I>
void shard_stats_impl(const Tensor& logits_t, const Tensor& targets_t, const Tensor& stats_t, int64_t begin,
                      int64_t vocab, int64_t ignore_index) {
  const int64_t n = logits_t.size(0), v = logits_t.size(1);
  const I* targets = targets_t.data<I>();
  check_targets(targets, n, vocab, ignore_index);
  const T* logits = logits_t.data<T>();
  double* stats = stats_t.data<double>();
  const int64_t ls = logits_t.stride(0);
#pragma omp parallel for schedule(static) if (n * v >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    double* st = stats + 3 * i;
    const int64_t t = int64_t(targets[i]);
    if (t == ignore_index) {
      st[0] = 0, st[1] = 1, st[2] = 0;
      continue;
    }
    const T* x = logits + i * ls;
    const T m = row_max(x, v);
    st[0] = double(m);
    st[1] = exp_sum<T>(x, nullptr, v, m);
    st[2] = t >= begin && t < begin + v ? double(x[t - begin]) : 0.0;
  }
}

template <typename T, typename I>
void shard_finish_impl(const Tensor& logits_t, const Tensor& targets_t, const Tensor& all_t, const Tensor& losses_t,
                       const Tensor& dlogits_t, double grad_scale, int64_t begin, int64_t ignore_index) {
  const int64_t n = logits_t.size(0), v = logits_t.size(1), ranks = all_t.size(0);
  const I* targets = targets_t.data<I>();
  const T* logits = logits_t.data<T>();
  const double* all = all_t.data<double>();
  T* losses = losses_t.data<T>();
  const int64_t ls = logits_t.stride(0);
  const bool backward = dlogits_t.defined();
  T* dlogits = backward ? dlogits_t.data<T>() : nullptr;
  const int64_t ds = backward ? dlogits_t.stride(0) : 0;
  const T scale = T(grad_scale);
#pragma omp parallel for schedule(static) if (n * v >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = int64_t(targets[i]);
    if (t == ignore_index) {
      losses[i] = T(0);
      if (backward) std::fill_n(dlogits + i * ds, v, T(0));
      continue;
    }
    // In rank order on every rank: the same M, S and loss everywhere.
    double m = -std::numeric_limits<double>::infinity(), xt = 0;
    for (int64_t r = 0; r < ranks; ++r) m = std::max(m, all[(r * n + i) * 3]);
    double s = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const double* st = all + (r * n + i) * 3;
      s += st[1] * std::exp(st[0] - m);
      xt += st[2];
    }
    losses[i] = T(std::log(s) + (m - xt));
    if (!backward) continue;
    const T* x = logits + i * ls;
    T* d = dlogits + i * ds;
    const T mt = T(m), f = T(grad_scale / s);
    for (int64_t j = 0; j < v; ++j) d[j] = std::exp(x[j] - mt) * f;
    if (t >= begin && t < begin + v) d[t - begin] -= scale;
  }
}

void cross_entropy_shard_stats_cpu(const Tensor& logits, const Tensor& targets, const Tensor& stats, int64_t begin,
                                   int64_t vocab, int64_t ignore_index) {
  const bool i64 = targets.dtype() == DType::I64;
  switch (logits.dtype()) {
    case DType::F32:
      return i64 ? shard_stats_impl<float, int64_t>(logits, targets, stats, begin, vocab, ignore_index)
                 : shard_stats_impl<float, int32_t>(logits, targets, stats, begin, vocab, ignore_index);
    case DType::F64:
      return i64 ? shard_stats_impl<double, int64_t>(logits, targets, stats, begin, vocab, ignore_index)
                 : shard_stats_impl<double, int32_t>(logits, targets, stats, begin, vocab, ignore_index);
    default: cpu::unsupported("cross_entropy_shard_stats", logits.dtype());
  }
}

void cross_entropy_shard_finish_cpu(const Tensor& logits, const Tensor& targets, const Tensor& all,
                                    const Tensor& losses, const Tensor& dlogits, double grad_scale, int64_t begin,
                                    int64_t ignore_index) {
  const bool i64 = targets.dtype() == DType::I64;
  switch (logits.dtype()) {
    case DType::F32:
      return i64 ? shard_finish_impl<float, int64_t>(logits, targets, all, losses, dlogits, grad_scale, begin,
                                                     ignore_index)
                 : shard_finish_impl<float, int32_t>(logits, targets, all, losses, dlogits, grad_scale, begin,
                                                     ignore_index);
    case DType::F64:
      return i64 ? shard_finish_impl<double, int64_t>(logits, targets, all, losses, dlogits, grad_scale, begin,
                                                      ignore_index)
                 : shard_finish_impl<double, int32_t>(logits, targets, all, losses, dlogits, grad_scale, begin,
                                                      ignore_index);
    default: cpu::unsupported("cross_entropy_shard_finish", logits.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(cross_entropy_stub, DeviceType::CPU, &cross_entropy_cpu);
FSDP_REGISTER_DISPATCH(cross_entropy_shard_stats_stub, DeviceType::CPU, &cross_entropy_shard_stats_cpu);
FSDP_REGISTER_DISPATCH(cross_entropy_shard_finish_stub, DeviceType::CPU, &cross_entropy_shard_finish_cpu);

}  // namespace fsdp
