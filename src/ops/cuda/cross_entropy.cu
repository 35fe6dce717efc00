// Softmax cross-entropy fused with its gradient, one block per row (the CPU's math,
// src/ops/cpu/cross_entropy.cpp):
//
//   m = max_v x[v],  S = sum_v exp(x[v] - m)            (S in double)
//   loss     = log S + m - x[t]                          (in double, rounded once)
//   dlogits  = (exp(x - m) * (grad_scale / S) - onehot(t) * grad_scale)
//
// Three sweeps over the row: the max (block_max), the sum of exponentials (block_sum),
// then the gradient, which recomputes exp(x - m) instead of storing it in the second
// sweep: one write of the row instead of two, and the same bits as the CPU (which stores
// e in T and scales it). In place: every thread reads x[t] before the first barrier, and
// in the last sweep each element is read by the thread that then overwrites it, so
// dlogits may be logits. An ignored row (t == ignore_index) gets loss 0 and a zero
// gradient row; the branch is uniform across the block.
//
// Targets are validated by the kernel, without a wait of the host: a target outside
// [0, v) that is not ignore_index is written to the device error record (Note [Device
// error record] in fsdp/core/cuda.h, raised with the CPU's message at the next read-back,
// e.g. the loss's) by thread 0, and its row is treated as ignored (loss 0, zero gradient),
// so x[t] is never read out of bounds.
//
// Vocabulary-parallel (tensor parallelism; fsdp/ops/cross_entropy.h): the same sweeps split
// around one all-gather of per-row statistics, one block per row in each half:
//   shard_stats:   (m, s, x_t) of this rank's columns: the first two sweeps above, and the
//                  target's logit when this rank holds it (0 otherwise); ignored rows
//                  (0, 1, 0)
//   shard_finish:  every thread merges the ranks' statistics in rank order (M = max m_r,
//                  S = sum s_r exp(m_r - M), x_t = sum x_t,r: the CPU's loop, so the same M,
//                  S and loss on every rank), then the gradient sweep above with (M, S)
// No atomics: each output element is written by one thread, so reruns give the same bits.
#include "common.cuh"
#include "cross_entropy.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, typename I>
__global__ void cross_entropy_kernel(RowsView logits, const I* __restrict__ targets, Stat<T>* losses,
                                     RowsView dlogits, int64_t v, double grad_scale, int64_t ignore_index,
                                     DeviceErrorRecord* errors) {
  using E = Elem<T>;
  using A = typename E::acc;
  __shared__ A max_scratch[32];
  __shared__ double sum_scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(logits.data) + row * logits.stride;
  T* d = dlogits.data != nullptr ? static_cast<T*>(dlogits.data) + row * dlogits.stride : nullptr;
  const int64_t t = int64_t(targets[row]);
  const bool bad = t != ignore_index && (t < 0 || t >= v);
  if (bad && threadIdx.x == 0) report_device_error(errors, DeviceErrorOp::CrossEntropy, row, t, v, ignore_index);
  if (t == ignore_index || bad) {
    if (threadIdx.x == 0) losses[row] = A(0);
    if (d != nullptr)
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) d[j] = E::store(A(0));
    return;
  }
  const A xt = E::load(x[t]);  // before any thread overwrites the row
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const A xv = E::load(x[j]);
    m = xv > m ? xv : m;
  }
  m = block_max(m, max_scratch, A(-INFINITY));
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += double(exp_of(E::load(x[j]) - m));
  s = block_sum(s, sum_scratch);
  if (threadIdx.x == 0) losses[row] = A(log(s) + (double(m) - double(xt)));
  if (d == nullptr) return;
  const A f = A(grad_scale / s), scale = A(grad_scale);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    A g = exp_of(E::load(x[j]) - m) * f;
    if (j == t) g -= scale;
    d[j] = E::store(g);
  }
}

template <typename T, typename I>
__global__ void cross_entropy_shard_stats_kernel(RowsView logits, const I* __restrict__ targets, double* stats,
                                                 int64_t v, int64_t begin, int64_t vocab, int64_t ignore_index,
                                                 DeviceErrorRecord* errors) {
  using E = Elem<T>;
  using A = typename E::acc;
  __shared__ A max_scratch[32];
  __shared__ double sum_scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(logits.data) + row * logits.stride;
  double* st = stats + 3 * row;
  const int64_t t = int64_t(targets[row]);
  const bool bad = t != ignore_index && (t < 0 || t >= vocab);
  if (bad && threadIdx.x == 0)
    report_device_error(errors, DeviceErrorOp::CrossEntropyShardStats, row, t, vocab, ignore_index);
  if (t == ignore_index || bad) {
    if (threadIdx.x == 0) st[0] = 0, st[1] = 1, st[2] = 0;
    return;
  }
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const A xv = E::load(x[j]);
    m = xv > m ? xv : m;
  }
  m = block_max(m, max_scratch, A(-INFINITY));
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += double(exp_of(E::load(x[j]) - m));
  s = block_sum(s, sum_scratch);
  if (threadIdx.x != 0) return;
  st[0] = double(m);
  st[1] = s;
  st[2] = t >= begin && t < begin + v ? double(E::load(x[t - begin])) : 0.0;
}

template <typename T, typename I>
__global__ void cross_entropy_shard_finish_kernel(RowsView logits, const I* __restrict__ targets,
                                                  const double* __restrict__ all, int64_t ranks, int64_t n,
                                                  Stat<T>* losses, RowsView dlogits, int64_t v, double grad_scale,
                                                  int64_t begin, int64_t ignore_index) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(logits.data) + row * logits.stride;
  T* d = dlogits.data != nullptr ? static_cast<T*>(dlogits.data) + row * dlogits.stride : nullptr;
  const int64_t t = int64_t(targets[row]);
  if (t == ignore_index) {
    if (threadIdx.x == 0) losses[row] = Stat<T>(0);
    if (d != nullptr)
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) d[j] = E::store(A(0));
    return;
  }
  // A bad target (recorded by shard_stats) has an ignored row's statistics on every rank
  // and lies outside every rank's columns: a finite loss, no read out of bounds.
  double m = -INFINITY, s = 0.0, xt = 0.0;
  for (int64_t r = 0; r < ranks; ++r) m = fmax(m, all[(r * n + row) * 3]);
  for (int64_t r = 0; r < ranks; ++r) {
    const double* st = all + (r * n + row) * 3;
    s += st[1] * exp(st[0] - m);
    xt += st[2];
  }
  if (threadIdx.x == 0) losses[row] = Stat<T>(log(s) + (m - xt));
  if (d == nullptr) return;
  const A mt = A(m), f = A(grad_scale / s), scale = A(grad_scale);
  const int64_t local_t = t - begin;  // this rank's column of the target, if in [0, v)
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    A g = exp_of(E::load(x[j]) - mt) * f;
    if (j == local_t) g -= scale;
    d[j] = E::store(g);
  }
}

template <typename T, typename I>
void cross_entropy_t(RowsView logits, const void* targets, void* losses, RowsView dlogits, int64_t n, int64_t v,
                     double grad_scale, int64_t ignore_index, DeviceErrorRecord* errors, cudaStream_t s) {
  FSDP_LAUNCH((cross_entropy_kernel<T, I>), unsigned(n), kThreads, 0, s, logits, static_cast<const I*>(targets),
              static_cast<Stat<T>*>(losses), dlogits, v, grad_scale, ignore_index, errors);
}

template <typename T>
void with_targets(DType target_t, RowsView logits, const void* targets, void* losses, RowsView dlogits, int64_t n,
                  int64_t v, double grad_scale, int64_t ignore_index, DeviceErrorRecord* errors, cudaStream_t s) {
  if (target_t == DType::I64)
    return cross_entropy_t<T, int64_t>(logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, errors, s);
  return cross_entropy_t<T, int32_t>(logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, errors, s);
}

template <typename F>
void with_target_type(DType target_t, F&& f) {
  if (target_t == DType::I64) return f(int64_t{});
  return f(int32_t{});
}

}  // namespace

bool cross_entropy_supports(DType t) { return is_floating(t); }

void launch_cross_entropy(DType t, DType target_t, RowsView logits, const void* targets, void* losses,
                          RowsView dlogits, int64_t n, int64_t v, double grad_scale, int64_t ignore_index,
                          DeviceErrorRecord* errors, cudaStream_t stream) {
  with_element_type(t, [&](auto element) {
    with_targets<decltype(element)>(target_t, logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, errors,
                                    stream);
  });
}

void launch_cross_entropy_shard_stats(DType t, DType target_t, RowsView logits, const void* targets, double* stats,
                                      int64_t n, int64_t v, int64_t begin, int64_t vocab, int64_t ignore_index,
                                      DeviceErrorRecord* errors, cudaStream_t stream) {
  with_element_type(t, [&](auto element) {
    with_target_type(target_t, [&](auto target) {
      using T = decltype(element);
      using I = decltype(target);
      FSDP_LAUNCH((cross_entropy_shard_stats_kernel<T, I>), unsigned(n), kThreads, 0, stream, logits,
                  static_cast<const I*>(targets), stats, v, begin, vocab, ignore_index, errors);
    });
  });
}

void launch_cross_entropy_shard_finish(DType t, DType target_t, RowsView logits, const void* targets,
                                       const double* all_stats, int64_t ranks, void* losses, RowsView dlogits,
                                       int64_t n, int64_t v, double grad_scale, int64_t begin, int64_t ignore_index,
                                       cudaStream_t stream) {
  with_element_type(t, [&](auto element) {
    with_target_type(target_t, [&](auto target) {
      using T = decltype(element);
      using I = decltype(target);
      FSDP_LAUNCH((cross_entropy_shard_finish_kernel<T, I>), unsigned(n), kThreads, 0, stream, logits,
                  static_cast<const I*>(targets), all_stats, ranks, n, static_cast<Stat<T>*>(losses), dlogits, v,
                  grad_scale, begin, ignore_index);
    });
  });
}

}  // namespace fsdp::cuda
