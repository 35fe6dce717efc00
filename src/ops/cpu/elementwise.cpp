// CPU whole-tensor ops: add, scale_, fill_, cast, sum_squares. Inputs are contiguous (the
// front end checks), so each op is one flat loop split across threads.
//
// cast converts between float32, float64, bfloat16 and float16 with round-to-nearest-even.
// float -> bf16/f16 uses the single-rounding conversions of dtype.h. double -> bf16/f16
// must not round twice (double -> float -> half can land one ulp off at a tie), so it
// first rounds to float with round-to-odd, which keeps enough information for the second
// rounding to be exactly the correctly rounded result (float carries >= 2 more bits than
// bf16 or f16: Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved
// algorithms using rounding to odd", 2008).
//
// sum_squares accumulates in double over fixed blocks of kBlock elements (each with 16
// fixed lanes), and adds the block partials in block order: the association depends only
// on the length, never on the thread count, so grad-norm clipping is bit-reproducible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lanes.h"
#include "unsupported.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp {

using cpu::kLanes;
namespace {

constexpr int64_t kMinParallelWork = 1 << 15;
constexpr int64_t kBlock = 4096;

// ---------------------------------------------------------------- add, scale_
template <typename T>
void add_impl(const Tensor& a_t, const Tensor& b_t, const Tensor& out_t) {
  const int64_t n = a_t.numel();
  const T* a = a_t.data<T>();
  const T* b = b_t.data<T>();
  T* out = out_t.data<T>();
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_cpu(const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (a.dtype()) {
    case DType::F32: return add_impl<float>(a, b, out);
    case DType::F64: return add_impl<double>(a, b, out);
    default: cpu::unsupported("add", a.dtype());
  }
}

template <typename T>
void scale_impl(const Tensor& x_t, double alpha) {
  const int64_t n = x_t.numel();
  T* x = x_t.data<T>();
  const T s = T(alpha);
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void scale_cpu(const Tensor& x, double alpha) {
  switch (x.dtype()) {
    case DType::F32: return scale_impl<float>(x, alpha);
    case DType::F64: return scale_impl<double>(x, alpha);
    default: cpu::unsupported("scale_", x.dtype());
  }
}

// ---------------------------------------------------------------- fill_
// Works on the bit pattern, so every dtype (bf16, f16, integers) is one loop.
template <typename U>
void fill_bits(void* data, int64_t n, const void* pattern) {
  U bits;
  std::memcpy(&bits, pattern, sizeof(U));
  U* p = static_cast<U*>(data);
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) p[i] = bits;
}

void fill_cpu(const Tensor& x, double value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  unsigned char pattern[8];
  store_from_double(pattern, x.dtype(), value);
  switch (x.element_size()) {
    case 2: return fill_bits<uint16_t>(x.data_ptr(), n, pattern);
    case 4: return fill_bits<uint32_t>(x.data_ptr(), n, pattern);
    case 8: return fill_bits<uint64_t>(x.data_ptr(), n, pattern);
    default: FSDP_FAIL("fill_: unexpected element size {} of {}", x.element_size(), x.str());
  }
}

// ---------------------------------------------------------------- cast
// double -> float rounding to odd: truncate toward zero, then set the last bit if inexact.
inline float to_float_odd(double d) {
  float f = float(d);
  if (double(f) == d || std::isnan(d)) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // also turns inf into FLT_MAX
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename D>
struct Convert;
template <>
struct Convert<float> {
  static float from(float v) { return v; }
  static float from(double v) { return float(v); }
  static float from(bf16 v) { return bf16_to_float(v); }
  static float from(f16 v) { return f16_to_float(v); }
};
template <>
struct Convert<double> {
  static double from(float v) { return v; }
  static double from(double v) { return v; }
  static double from(bf16 v) { return bf16_to_float(v); }
  static double from(f16 v) { return f16_to_float(v); }
};
template <>
struct Convert<bf16> {
  static bf16 from(float v) { return float_to_bf16(v); }
  static bf16 from(double v) { return float_to_bf16(to_float_odd(v)); }
  static bf16 from(bf16 v) { return v; }
  static bf16 from(f16 v) { return float_to_bf16(f16_to_float(v)); }  // exact, then one rounding
};
template <>
struct Convert<f16> {
  static f16 from(float v) { return float_to_f16(v); }
  static f16 from(double v) { return float_to_f16(to_float_odd(v)); }
  static f16 from(bf16 v) { return float_to_f16(bf16_to_float(v)); }  // exact, then one rounding
  static f16 from(f16 v) { return v; }
};

template <typename S, typename D>
void cast_impl(const Tensor& src_t, const Tensor& dst_t) {
  const int64_t n = src_t.numel();
  const S* src = static_cast<const S*>(src_t.data_ptr());
  D* dst = static_cast<D*>(dst_t.data_ptr());
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) dst[i] = Convert<D>::from(src[i]);
}

template <typename S>
void cast_from(const Tensor& src, const Tensor& dst) {
  switch (dst.dtype()) {
    case DType::F32: return cast_impl<S, float>(src, dst);
    case DType::F64: return cast_impl<S, double>(src, dst);
    case DType::BF16: return cast_impl<S, bf16>(src, dst);
    case DType::F16: return cast_impl<S, f16>(src, dst);
    default: FSDP_FAIL("cast: destination dtype {} is not a float type", dtype_name(dst.dtype()));
  }
}

void cast_cpu(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  switch (src.dtype()) {
    case DType::F32: return cast_from<float>(src, dst);
    case DType::F64: return cast_from<double>(src, dst);
    case DType::BF16: return cast_from<bf16>(src, dst);
    case DType::F16: return cast_from<f16>(src, dst);
    default: FSDP_FAIL("cast: source dtype {} is not a float type", dtype_name(src.dtype()));
  }
}

// ---------------------------------------------------------------- sum_squares
template <typename T>
double block_sum_squares(const T* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i < n; ++i, ++l) acc[l] += double(x[i]) * double(x[i]);
  return cpu::combine_lanes(acc);
}

template <typename T>
double sum_squares_impl(const Tensor& x_t) {
  const int64_t n = x_t.numel();
  if (n == 0) return 0.0;
  const T* x = x_t.data<T>();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  thread_local std::vector<double> partials;  // grows only: no allocation in steady state
  if (partials.size() < size_t(blocks)) partials.resize(size_t(blocks));
  double* part = partials.data();
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * kBlock;
    part[b] = block_sum_squares(x + i0, std::min(kBlock, n - i0));
  }
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += part[b];
  return total;
}

double sum_squares_cpu(const Tensor& x) {
  switch (x.dtype()) {
    case DType::F32: return sum_squares_impl<float>(x);
    case DType::F64: return sum_squares_impl<double>(x);
    default: cpu::unsupported("sum_squares", x.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(add_stub, DeviceType::CPU, &add_cpu);
FSDP_REGISTER_DISPATCH(scale_stub, DeviceType::CPU, &scale_cpu);
FSDP_REGISTER_DISPATCH(fill_stub, DeviceType::CPU, &fill_cpu);
FSDP_REGISTER_DISPATCH(cast_stub, DeviceType::CPU, &cast_cpu);
FSDP_REGISTER_DISPATCH(sum_squares_stub, DeviceType::CPU, &sum_squares_cpu);

}  // namespace fsdp
