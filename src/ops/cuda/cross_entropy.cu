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
// Targets are validated first (find_bad_target, a read-back that synchronises the host;
// TODO issue 7: a device-side flag checked at the loss read-back), so a bad target is the
// CPU's error and no output is touched.
#include "common.cuh"
#include "cross_entropy.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

template <typename I>
__global__ void find_bad_target_kernel(const I* __restrict__ targets, int64_t n, int64_t v, int64_t ignore_index,
                                       unsigned long long* __restrict__ first_bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = int64_t(targets[i]);
    if (t != ignore_index && (t < 0 || t >= v)) atomicMin(first_bad, (unsigned long long)i);
  }
}

template <typename T, typename I>
__global__ void cross_entropy_kernel(RowsView logits, const I* __restrict__ targets, typename Elem<T>::acc* losses,
                                     RowsView dlogits, int64_t v, double grad_scale, int64_t ignore_index) {
  using E = Elem<T>;
  using A = typename E::acc;
  __shared__ A max_scratch[32];
  __shared__ double sum_scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(logits.data) + row * logits.stride;
  T* d = dlogits.data != nullptr ? static_cast<T*>(dlogits.data) + row * dlogits.stride : nullptr;
  const int64_t t = int64_t(targets[row]);
  if (t == ignore_index) {
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

template <typename I>
BadTarget find_bad_t(const void* targets, int64_t n, int64_t v, int64_t ignore_index, cudaStream_t s) {
  unsigned long long* flag = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(unsigned long long), s));
  FSDP_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), s));
  FSDP_LAUNCH(find_bad_target_kernel<I>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const I*>(targets), n, v,
              ignore_index, flag);
  unsigned long long row = 0;
  FSDP_CUDA_CHECK(cudaMemcpyAsync(&row, flag, sizeof(row), cudaMemcpyDeviceToHost, s));
  FSDP_CUDA_CHECK(cudaFreeAsync(flag, s));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
  if (row == ~0ull) return BadTarget{-1, 0};
  I target = 0;
  FSDP_CUDA_CHECK(
      cudaMemcpyAsync(&target, static_cast<const I*>(targets) + row, sizeof(I), cudaMemcpyDeviceToHost, s));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
  return BadTarget{int64_t(row), int64_t(target)};
}

template <typename T, typename I>
void cross_entropy_t(RowsView logits, const void* targets, void* losses, RowsView dlogits, int64_t n, int64_t v,
                     double grad_scale, int64_t ignore_index, cudaStream_t s) {
  FSDP_LAUNCH((cross_entropy_kernel<T, I>), unsigned(n), kThreads, 0, s, logits, static_cast<const I*>(targets),
              static_cast<typename Elem<T>::acc*>(losses), dlogits, v, grad_scale, ignore_index);
}

template <typename T>
void with_targets(DType target_t, RowsView logits, const void* targets, void* losses, RowsView dlogits, int64_t n,
                  int64_t v, double grad_scale, int64_t ignore_index, cudaStream_t s) {
  if (target_t == DType::I64)
    return cross_entropy_t<T, int64_t>(logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, s);
  return cross_entropy_t<T, int32_t>(logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, s);
}

}  // namespace

bool cross_entropy_supports(DType t) { return is_floating(t); }

BadTarget find_bad_target(DType target_t, const void* targets, int64_t n, int64_t v, int64_t ignore_index,
                          cudaStream_t stream) {
  if (target_t == DType::I64) return find_bad_t<int64_t>(targets, n, v, ignore_index, stream);
  return find_bad_t<int32_t>(targets, n, v, ignore_index, stream);
}

void launch_cross_entropy(DType t, DType target_t, RowsView logits, const void* targets, void* losses,
                          RowsView dlogits, int64_t n, int64_t v, double grad_scale, int64_t ignore_index,
                          cudaStream_t stream) {
  if (t == DType::F32)
    return with_targets<float>(target_t, logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, stream);
  if (t == DType::F64)
    return with_targets<double>(target_t, logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, stream);
  if (t == DType::BF16)
    return with_targets<bf16>(target_t, logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, stream);
  if (t == DType::F16)
    return with_targets<f16>(target_t, logits, targets, losses, dlogits, n, v, grad_scale, ignore_index, stream);
}

}  // namespace fsdp::cuda
