// CPU RMSNorm (Llama / Hugging Face LlamaRMSNorm), forward and backward side by side.
//
//   forward:  rstd[n] = 1 / sqrt(mean_c x[n,c]^2 + eps),  y[n,c] = (x[n,c] * rstd[n]) * w[c]
//   backward: g = dy * w,  dot[n] = mean_c g[n,c] * x[n,c]
//             dx[n,c] = rstd[n] * (g[n,c] - x[n,c] * rstd[n]^2 * dot[n])     (= or +=)
//             dw[c]  += sum_n dy[n,c] * x[n,c] * rstd[n]
//
// Layout: x, y, dy, dx [N, C] with packed rows, each with its own row stride; w, dw [C];
// rstd [N] in T (float32 for float32, float64 for float64).
//
// Row sums use 16 independent double accumulators combined in a fixed tree: a fixed
// association the compiler can still vectorise without -ffast-math, and accurate enough
// that float rows of 8192 channels lose nothing visible.
//
// dw is a reduction over rows. Rows are cut into blocks of kRowBlock; each block sums its
// rows' contributions in row order into its own double partial, then the partials are added
// into dw in block order. Block boundaries depend only on N, so dw has the same bits for
// any thread count (a resumed run is bit-identical). The partials live in a thread_local
// buffer that only grows, so steady-state training allocates nothing here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lanes.h"
#include "unsupported.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp {

using cpu::kLanes;
namespace {

constexpr int64_t kMinParallelWork = 1 << 15;
constexpr int64_t kRowBlock = 32;
constexpr int64_t kColChunk = 256;

// sum_c a[c] * b[c] * e[c] over one row in double (e may be null: then a*b).
template <typename T>
double row_dot(const T* a, const T* b, const T* e, int64_t c) {
  double acc[kLanes] = {};
  int64_t i = 0;
  if (e == nullptr) {
    for (; i + kLanes <= c; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += double(a[i + l]) * double(b[i + l]);
    for (int l = 0; i < c; ++i, ++l) acc[l] += double(a[i]) * double(b[i]);
  } else {
    for (; i + kLanes <= c; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += double(a[i + l]) * double(b[i + l]) * double(e[i + l]);
    for (int l = 0; i < c; ++i, ++l) acc[l] += double(a[i]) * double(b[i]) * double(e[i]);
  }
  return cpu::combine_lanes(acc);
}

template <typename T>
void forward_impl(const Tensor& x_t, const Tensor& w_t, const Tensor& y_t, const Tensor& rstd_t, double eps) {
  const int64_t n = x_t.size(0), c = x_t.size(1);
  const int64_t xs = x_t.stride(0), ys = y_t.stride(0);
  const T* x = x_t.data<T>();
  const T* w = w_t.data<T>();
  T* y = y_t.data<T>();
  T* rstd = rstd_t.data<T>();
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * xs;
    T* yr = y + i * ys;
    const double ms = c > 0 ? row_dot<T>(xr, xr, nullptr, c) / double(c) : 0.0;
    const T r = T(1.0 / std::sqrt(ms + eps));
    rstd[i] = r;
    for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] * r) * w[j];
  }
}

template <typename T>
void backward_impl(const Tensor& dy_t, const Tensor& x_t, const Tensor& w_t, const Tensor& rstd_t,
                   const Tensor& dx_t, const Tensor& dw_t, bool accumulate_dx) {
  const int64_t n = x_t.size(0), c = x_t.size(1);
  if (n == 0 || c == 0) return;
  const int64_t dys = dy_t.stride(0), xs = x_t.stride(0), dxs = dx_t.stride(0);
  const T* dy = dy_t.data<T>();
  const T* x = x_t.data<T>();
  const T* w = w_t.data<T>();
  const T* rstd = rstd_t.data<T>();
  T* dx = dx_t.data<T>();
  T* dw = dw_t.defined() ? dw_t.data<T>() : nullptr;  // null: a frozen weight, no gradient

  const int64_t blocks = (n + kRowBlock - 1) / kRowBlock;
  thread_local std::vector<double> scratch;
  if (scratch.size() < size_t(blocks * c)) scratch.resize(size_t(blocks * c));
  double* partial = scratch.data();
  const bool parallel = n * c >= kMinParallelWork;

#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    double* pw = partial + b * c;
    if (dw != nullptr) std::fill_n(pw, c, 0.0);
    for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
      const T* dyr = dy + i * dys;
      const T* xr = x + i * xs;
      T* dxr = dx + i * dxs;
      const T r = rstd[i];
      const double dot = row_dot<T>(dyr, w, xr, c) / double(c);
      const T k = T(double(r) * double(r) * dot);
      // Each element's inputs are read before its dx is written, so dx may alias dy.
      if (accumulate_dx) {
        for (int64_t j = 0; j < c; ++j) {
          const T g = dyr[j] * w[j], xv = xr[j];
          if (dw != nullptr) pw[j] += double(dyr[j]) * double(xv) * double(r);
          dxr[j] += r * (g - xv * k);
        }
      } else {
        for (int64_t j = 0; j < c; ++j) {
          const T g = dyr[j] * w[j], xv = xr[j];
          if (dw != nullptr) pw[j] += double(dyr[j]) * double(xv) * double(r);
          dxr[j] = r * (g - xv * k);
        }
      }
    }
  }

  if (dw == nullptr) return;
  // Combine the block partials in block order, parallel over column chunks.
  const int64_t chunks = (c + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColChunk, len = std::min(kColChunk, c - c0);
    double acc[kColChunk];
    std::fill_n(acc, len, 0.0);
    for (int64_t b = 0; b < blocks; ++b) {
      const double* pw = partial + b * c + c0;
      for (int64_t j = 0; j < len; ++j) acc[j] += pw[j];
    }
    for (int64_t j = 0; j < len; ++j) dw[c0 + j] = T(double(dw[c0 + j]) + acc[j]);
  }
}

void rmsnorm_forward_cpu(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd, double eps) {
  switch (x.dtype()) {
    case DType::F32: return forward_impl<float>(x, w, y, rstd, eps);
    case DType::F64: return forward_impl<double>(x, w, y, rstd, eps);
    default: cpu::unsupported("rmsnorm_forward", x.dtype());
  }
}

void rmsnorm_backward_cpu(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                          const Tensor& dw, bool accumulate_dx) {
  switch (x.dtype()) {
    case DType::F32: return backward_impl<float>(dy, x, w, rstd, dx, dw, accumulate_dx);
    case DType::F64: return backward_impl<double>(dy, x, w, rstd, dx, dw, accumulate_dx);
    default: cpu::unsupported("rmsnorm_backward", x.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(rmsnorm_forward_stub, DeviceType::CPU, &rmsnorm_forward_cpu);
FSDP_REGISTER_DISPATCH(rmsnorm_backward_stub, DeviceType::CPU, &rmsnorm_backward_cpu);

}  // namespace fsdp
