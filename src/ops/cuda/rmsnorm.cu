// RMSNorm (Llama), forward and backward, the CPU's math (src/ops/cpu/rmsnorm.cpp):
//
//   forward:  rstd[n] = 1 / sqrt(mean_c x[n,c]^2 + eps),  y[n,c] = (x[n,c] * rstd[n]) * w[c]
//   backward: g = dy * w,  dot[n] = mean_c g[n,c] * x[n,c]
//             dx[n,c] = rstd[n] * (g[n,c] - x[n,c] * rstd[n]^2 * dot[n])     (= or +=)
//             dw[c]  += sum_n dy[n,c] * x[n,c] * rstd[n]
//
// Layout: one block per row for the row kernels; the row's sums (mean of squares, dot)
// accumulate in double like the CPU's, through block_sum's fixed tree. Element math is in
// float (double for float64); bfloat16 and float16 rows are converted at load and store.
//
// dw is a reduction over rows, made deterministic as on the CPU: rows are cut into chunks
// whose size depends only on N; a thread per (column, chunk) sums its rows in order into a
// double partial, and a thread per column adds the partials in chunk order into dw. No
// atomics, so the bits are the same on every run.
//
// dx may alias dy: every thread has read the whole row's dy (for dot) before the barrier
// inside block_sum, and afterwards each element's dy is read before its dx is written.
#include "common.cuh"
#include "rmsnorm.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kRowChunk = 64;

template <typename T>
using Acc = typename Elem<T>::acc;

template <typename T>
__global__ void rmsnorm_fwd_kernel(const T* __restrict__ x, int64_t xs, const T* __restrict__ w, T* __restrict__ y,
                                   int64_t ys, Stat<T>* __restrict__ rstd, int64_t c, double eps) {
  using E = Elem<T>;
  __shared__ double scratch[32];
  const T* xr = x + int64_t(blockIdx.x) * xs;
  T* yr = y + int64_t(blockIdx.x) * ys;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const double v = double(E::load(xr[j]));
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  const double ms = c > 0 ? acc / double(c) : 0.0;
  const Acc<T> r = Acc<T>(1.0 / sqrt(ms + eps));
  if (threadIdx.x == 0) rstd[blockIdx.x] = Stat<T>(r);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) yr[j] = E::store((E::load(xr[j]) * r) * E::load(w[j]));
}

template <typename T>
__global__ void rmsnorm_bwd_dx_kernel(const T* dy, int64_t dys, const T* __restrict__ x, int64_t xs,
                                      const T* __restrict__ w, const Stat<T>* __restrict__ rstd, T* dx, int64_t dxs,
                                      int64_t c, bool accumulate) {
  using E = Elem<T>;
  using A = Acc<T>;
  __shared__ double scratch[32];
  const T* dyr = dy + int64_t(blockIdx.x) * dys;
  const T* xr = x + int64_t(blockIdx.x) * xs;
  T* dxr = dx + int64_t(blockIdx.x) * dxs;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    acc += double(E::load(dyr[j])) * double(E::load(w[j])) * double(E::load(xr[j]));
  const double dot = block_sum(acc, scratch) / double(c);
  const A r = A(rstd[blockIdx.x]);
  const A k = A(double(r) * double(r) * dot);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const A g = E::load(dyr[j]) * E::load(w[j]), xv = E::load(xr[j]);
    const A d = r * (g - xv * k);
    dxr[j] = E::store(accumulate ? E::load(dxr[j]) + d : d);
  }
}

// partial[chunk][col] = sum over the chunk's rows of dy * x * rstd, in row order.
template <typename T>
__global__ void rmsnorm_bwd_dw_partial_kernel(const T* __restrict__ dy, int64_t dys, const T* __restrict__ x,
                                              int64_t xs, const Stat<T>* __restrict__ rstd, double* __restrict__ partial,
                                              int64_t n, int64_t c, int64_t rows_per_chunk) {
  using E = Elem<T>;
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
  double acc = 0.0;
  for (int64_t i = r0; i < r1; ++i)
    acc += double(E::load(dy[i * dys + col])) * double(E::load(x[i * xs + col])) * double(rstd[i]);
  partial[int64_t(blockIdx.y) * c + col] = acc;
}

template <typename T>
__global__ void rmsnorm_bwd_dw_sum_kernel(const double* __restrict__ partial, int64_t chunks, T* __restrict__ dw,
                                          int64_t c) {
  using E = Elem<T>;
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  double acc = 0.0;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * c + col];
  dw[col] = E::from_double(double(E::load(dw[col])) + acc);
}

template <typename T>
void forward_t(RowsView x, const void* w, RowsView y, void* rstd, int64_t n, int64_t c, double eps, cudaStream_t s) {
  FSDP_LAUNCH(rmsnorm_fwd_kernel<T>, unsigned(n), kThreads, 0, s, static_cast<const T*>(x.data), x.stride,
              static_cast<const T*>(w), static_cast<T*>(y.data), y.stride, static_cast<Stat<T>*>(rstd), c, eps);
}

// dw += sum_n dy * x * rstd, by row chunks into double partials summed in chunk order.
template <typename T>
void backward_dw(RowsView dy, RowsView x, const void* rstd, void* dw, int64_t n, int64_t c, cudaStream_t s) {
  const int64_t rows_per_chunk = n / kRowChunk < 65535 ? kRowChunk : (n + 65534) / 65535;
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  double* partial = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(chunks * c) * sizeof(double), s));
  const dim3 grid(blocks_for(c, kThreads), unsigned(chunks));
  FSDP_LAUNCH(rmsnorm_bwd_dw_partial_kernel<T>, grid, kThreads, 0, s, static_cast<const T*>(dy.data), dy.stride,
              static_cast<const T*>(x.data), x.stride, static_cast<const Stat<T>*>(rstd), partial, n, c, rows_per_chunk);
  FSDP_LAUNCH(rmsnorm_bwd_dw_sum_kernel<T>, blocks_for(c, kThreads), kThreads, 0, s, partial, chunks,
              static_cast<T*>(dw), c);
  FSDP_CUDA_CHECK(cudaFreeAsync(partial, s));
}

template <typename T>
void backward_t(RowsView dy, RowsView x, const void* w, const void* rstd, RowsView dx, void* dw, int64_t n, int64_t c,
                bool accumulate_dx, cudaStream_t s) {
  // dw first: dx may alias dy. A frozen weight (dw null) gets no gradient.
  if (dw != nullptr) backward_dw<T>(dy, x, rstd, dw, n, c, s);
  FSDP_LAUNCH(rmsnorm_bwd_dx_kernel<T>, unsigned(n), kThreads, 0, s, static_cast<const T*>(dy.data), dy.stride,
              static_cast<const T*>(x.data), x.stride, static_cast<const T*>(w), static_cast<const Stat<T>*>(rstd),
              static_cast<T*>(dx.data), dx.stride, c, accumulate_dx);
}

}  // namespace

bool rmsnorm_supports(DType t) { return is_floating(t); }

void launch_rmsnorm_forward(DType t, RowsView x, const void* w, RowsView y, void* rstd, int64_t n, int64_t c,
                            double eps, cudaStream_t stream) {
  if (t == DType::F32) return forward_t<float>(x, w, y, rstd, n, c, eps, stream);
  if (t == DType::F64) return forward_t<double>(x, w, y, rstd, n, c, eps, stream);
  if (t == DType::BF16) return forward_t<bf16>(x, w, y, rstd, n, c, eps, stream);
  if (t == DType::F16) return forward_t<f16>(x, w, y, rstd, n, c, eps, stream);
}

void launch_rmsnorm_backward(DType t, RowsView dy, RowsView x, const void* w, const void* rstd, RowsView dx, void* dw,
                             int64_t n, int64_t c, bool accumulate_dx, cudaStream_t stream) {
  if (t == DType::F32) return backward_t<float>(dy, x, w, rstd, dx, dw, n, c, accumulate_dx, stream);
  if (t == DType::F64) return backward_t<double>(dy, x, w, rstd, dx, dw, n, c, accumulate_dx, stream);
  if (t == DType::BF16) return backward_t<bf16>(dy, x, w, rstd, dx, dw, n, c, accumulate_dx, stream);
  if (t == DType::F16) return backward_t<f16>(dy, x, w, rstd, dx, dw, n, c, accumulate_dx, stream);
}

}  // namespace fsdp::cuda
