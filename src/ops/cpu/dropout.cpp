// CPU dropout, forward and backward side by side (fsdp/ops/dropout.h): each element's
// mask bit is drawn from its (key, global row, column), so the loops can run in any order
// and on any thread. out may alias x, and dx may alias dout.
#include <cstdint>

#include "fsdp/core/random.h"
#include "fsdp/ops/dropout.h"
#include "rounded.h"
#include "unsupported.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

// dst[i, j] = (accumulate ? dst[i, j] : 0) + (keep ? src[i, j] * scale : 0)
template <typename T>
void apply_mask(const Tensor& src_t, const Tensor& dst_t, const DropoutArgs& a, bool accumulate) {
  const int64_t n = src_t.size(0), c = src_t.size(1);
  const int64_t ss = src_t.stride(0), ds = dst_t.stride(0);
  const T* src = src_t.data<T>();
  T* dst = dst_t.data<T>();
  const T scale = T(a.scale);
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t row_key = mix_key(a.key, uint64_t(a.row0 + i));
    const T* s = src + i * ss;
    T* d = dst + i * ds;
    for (int64_t j = 0; j < c; ++j) {
      const bool keep = (splitmix64(mix_key(row_key, uint64_t(a.col0 + j))) >> 11) >= a.threshold;
      const T v = keep ? cpu::rounded(s[j] * scale) : T(0);  // no FMA with the add: CUDA's bits
      d[j] = accumulate ? d[j] + v : v;
    }
  }
}

void dropout_forward_cpu(const Tensor& x, const Tensor& out, const DropoutArgs& a) {
  switch (x.dtype()) {
    case DType::F32: return apply_mask<float>(x, out, a, false);
    case DType::F64: return apply_mask<double>(x, out, a, false);
    default: cpu::unsupported("dropout_forward", x.dtype());
  }
}

void dropout_backward_cpu(const Tensor& dout, const Tensor& dx, const DropoutArgs& a, bool accumulate) {
  switch (dout.dtype()) {
    case DType::F32: return apply_mask<float>(dout, dx, a, accumulate);
    case DType::F64: return apply_mask<double>(dout, dx, a, accumulate);
    default: cpu::unsupported("dropout_backward", dout.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(dropout_forward_stub, DeviceType::CPU, &dropout_forward_cpu);
FSDP_REGISTER_DISPATCH(dropout_backward_stub, DeviceType::CPU, &dropout_backward_cpu);

}  // namespace fsdp
