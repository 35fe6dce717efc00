// CPU rotary position embedding (rotate-half convention, see include/fsdp/ops/rope.h).
// One token row (b, t) at a time: its H heads share the cos/sin row of position
// pos_offset + t (minus its document's start, Note [Document masking]). Every output
// element is computed from two inputs by a fixed formula, so the bits do not depend on the
// thread count.
#include <omp.h>

#include <cstring>
#include <vector>

#include "fsdp/ops/rope.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelElements = int64_t(1) << 15;

// Rotates one head of D = 2*half values. `in` is a private copy of the head, so y may
// alias x (in place) and the loop still vectorises with no aliasing checks.
template <typename T>
inline void rotate_head(const T* __restrict in, T* __restrict out, const float* __restrict cs,
                        const float* __restrict sn, int64_t half, bool inverse) {
  const T sign = inverse ? T(-1) : T(1);
  for (int64_t i = 0; i < half; ++i) {
    const T c = T(cs[i]), s = sign * T(sn[i]);
    const T x0 = in[i], x1 = in[i + half];
    out[i] = x0 * c - x1 * s;
    out[i + half] = x1 * c + x0 * s;
  }
}

template <typename T>
void rope_impl(const Tensor& x, const Tensor& y, const Tensor& cos, const Tensor& sin, int64_t pos_offset,
               bool inverse, const Tensor& doc_start) {
  const int32_t* ds = doc_start.defined() ? doc_start.data<int32_t>() : nullptr;
  const int64_t B = x.size(0), Tn = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const float* cp = cos.data<float>();
  const float* sp = sin.data<float>();
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), ys0 = y.stride(0), ys1 = y.stride(1);
  // Small inputs (decoding, tests) stay on the calling thread: waking the team costs more
  // than rotating a few thousand values.
#pragma omp parallel if (B * Tn * H * D >= kMinParallelElements)
  {
    // One head's copy per thread; thread_local and only ever grown, so steady-state
    // training steps allocate nothing here.
    static thread_local std::vector<T> tmp;
    if (tmp.size() < size_t(D)) tmp.resize(size_t(D));
    T* in = tmp.data();
#pragma omp for schedule(static)
    for (int64_t row = 0; row < B * Tn; ++row) {
      const int64_t b = row / Tn, t = row % Tn;
      const int64_t pos = pos_offset + t - (ds != nullptr ? ds[row] : 0);
      const float* cs = cp + pos * half;
      const float* sn = sp + pos * half;
      const T* xr = xp + b * xs0 + t * xs1;
      T* yr = yp + b * ys0 + t * ys1;
      for (int64_t h = 0; h < H; ++h) {
        std::memcpy(in, xr + h * D, size_t(D) * sizeof(T));
        rotate_head(in, yr + h * D, cs, sn, half, inverse);
      }
    }
  }
}

void rope_cpu(const Tensor& x, const Tensor& y, const Tensor& cos, const Tensor& sin, int64_t pos_offset,
              bool inverse, const Tensor& doc_start) {
  switch (x.dtype()) {
    case DType::F32: return rope_impl<float>(x, y, cos, sin, pos_offset, inverse, doc_start);
    case DType::F64: return rope_impl<double>(x, y, cos, sin, pos_offset, inverse, doc_start);
    default: FSDP_FAIL("rope: the CPU backend supports float32 and float64, got {}", x.str());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(rope_stub, DeviceType::CPU, &rope_cpu);

}  // namespace fsdp
