// Tensor's fill_, copy_, clone and to: the methods that reach a device (Note [Tensor
// copies across devices]); the rest of Tensor is in tensor.cpp.
#include <array>
#include <cstring>

#include "fsdp/core/device_kernels.h"
#include "fsdp/core/tensor.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp {

// Note [Tensor copies across devices]
// fill_, copy_, clone and to work on every device, so model and test code never branch on
// it. Host-only tensors keep the element loops below. A CUDA tensor goes through the
// backend: fill_ through the op set's fill kernel, copies through cuda::copy (one
// cudaMemcpyAsync on the current stream of the device involved, Note [CUDA current
// stream]) and conversions through the cast kernel. The fill and cast kernels are reached
// through core's own stubs (fsdp/core/device_kernels.h), which the op backends register,
// so core never includes ops; what they get here is contiguous, same-shape and same-device
// by construction (what ops' checked front ends would verify). Layouts: a strided tensor
// is cut into runs that are contiguous in both tensors (the innermost dimensions that are
// packed in both), one copy or fill per run; so a row-strided view (a column block of a
// matrix) costs one call per row, and a transposed one a call per element: correct, but
// meant for set-up and tests, not for a step. Copies into host memory return once the data
// is there (cuda::copy synchronises); the others are stream-ordered, like a kernel.
// Where the device cannot convert (integer dtypes), the data is converted on the host.
namespace {

// Calls f(offset_a, offset_b, len) for runs of `len` elements that are contiguous in two
// layouts of one shape (offsets in elements from each tensor's storage start), in order.
template <typename F>
void for_each_run(const Tensor& a, const Tensor& b, F&& f) {
  const Dims& sz = a.sizes();
  const Dims& sa = a.strides();
  const Dims& sb = b.strides();
  int outer = sz.size();  // dimensions [0, outer) are iterated, [outer, dim) form a run
  int64_t run = 1;
  while (outer > 0) {
    const int d = outer - 1;
    if (sz[d] != 1 && (sa[d] != run || sb[d] != run)) break;
    run *= sz[d];
    --outer;
  }
  const int64_t count = a.numel() / run;
  std::array<int64_t, kMaxDims> idx{};
  int64_t oa = a.offset(), ob = b.offset();
  for (int64_t r = 0; r < count; ++r) {
    f(oa, ob, run);
    for (int d = outer - 1; d >= 0; --d) {  // odometer over the outer dimensions
      oa += sa[d];
      ob += sb[d];
      if (++idx[size_t(d)] < sz[d]) break;
      oa -= sa[d] * sz[d];
      ob -= sb[d] * sz[d];
      idx[size_t(d)] = 0;
    }
  }
}

// A flat view of `len` elements at element `offset` of t's storage (for one run).
Tensor run_view(const Tensor& t, int64_t offset, int64_t len) {
  return Tensor::from_blob(static_cast<char*>(t.storage()->data()) + offset * int64_t(t.element_size()), {len},
                           t.dtype(), t.device());
}

#if defined(FSDP_WITH_CUDA)
// dst = src, same dtype, at least one of them on a CUDA device.
void device_copy_same_dtype(const Tensor& dst, const Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous()) {
    cuda::copy(src, dst);
    return;
  }
  if (dst.device().is_cpu()) {
    // Into host memory: compact on the device (no host waits), download once, scatter here.
    const Tensor packed = src.is_contiguous() ? src : src.clone();
    Tensor host = Tensor::empty(src.sizes(), src.dtype());
    cuda::copy(packed, host);
    dst.copy_(host);
    return;
  }
  if (src.device().is_cpu()) {
    // From host memory: pack here, upload once, then scatter on the device.
    const Tensor packed = src.is_contiguous() ? src : src.clone();
    if (dst.is_contiguous()) {
      cuda::copy(packed, dst);
      return;
    }
    Tensor staged = Tensor::empty(src.sizes(), src.dtype(), dst.device());
    cuda::copy(packed, staged);
    dst.copy_(staged);
    return;
  }
  for_each_run(dst, src, [&](int64_t od, int64_t os, int64_t len) {
    cuda::copy(run_view(src, os, len), run_view(dst, od, len));
  });
}

bool device_can_cast(DType t) { return is_floating(t); }
#endif

}  // namespace

void Tensor::fill_(double v) const {
  check_defined(*this, "tensor");
  if (!device_.is_cpu()) {
    if (numel_ == 0) return;
    check_fill_value(*this, v);
    if (contiguous_) {
      fill_stub(device_, *this, v);
      return;
    }
    for_each_run(*this, *this, [&](int64_t o, int64_t, int64_t len) { fill_stub(device_, run_view(*this, o, len), v); });
    return;
  }
  if (numel_ == 0) return;
  if (contiguous_ && dtype_ == DType::F32) {
    float* p = data<float>();
    const float f = float(v);
    for (int64_t i = 0; i < numel_; ++i) p[i] = f;
    return;
  }
  for (int64_t i = 0; i < numel_; ++i) set_flat(i, v);
}

void Tensor::copy_(const Tensor& src) const {
  check_defined(*this, "destination");
  check_defined(src, "source");
  FSDP_CHECK(sizes_ == src.sizes_, "copy_ from {} into {}: shapes differ", src.str(), str());
  if (!device_.is_cpu() || !src.device_.is_cpu()) {
#if defined(FSDP_WITH_CUDA)
    if (numel_ == 0) return;
    if (dtype_ == src.dtype_ && data_ptr() == src.data_ptr() && strides_ == src.strides_) return;  // onto itself
    if (dtype_ == src.dtype_) {
      device_copy_same_dtype(*this, src);
    } else if (src.device_.is_cpu()) {
      copy_(src.to(dtype_));  // convert on the host, then upload
    } else if (device_.is_cpu()) {
      copy_(src.to(Device::cpu()));  // download, then convert on the host
    } else if (device_can_cast(dtype_) && device_can_cast(src.dtype_)) {
      // Convert on the source's device with the cast kernel, then move.
      const Tensor packed = src.is_contiguous() ? src : src.clone();
      if (src.device_ == device_ && contiguous_) {
        cast_stub(device_, packed, *this);
      } else {
        Tensor converted = empty(sizes_, dtype_, src.device_);
        cast_stub(src.device_, packed, converted);
        copy_(converted);
      }
    } else {
      copy_(src.to(Device::cpu()).to(dtype_));  // integer conversions: on the host
    }
    return;
#else
    FSDP_FAIL("copy_ from {} into {}: this build has no CUDA backend", src.str(), str());
#endif
  }
  if (numel_ == 0) return;
  if (contiguous_ && src.contiguous_ && dtype_ == src.dtype_) {
    std::memmove(data_ptr(), src.data_ptr(), nbytes());
    return;
  }
  for (int64_t i = 0; i < numel_; ++i) set_flat(i, src.get_flat(i));
}

Tensor Tensor::clone() const {
  Tensor t = empty(sizes_, dtype_, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(sizes_, dtype, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device device) const { return to(device, dtype_); }

Tensor Tensor::to(Device device, DType dtype) const {
  check_defined(*this, "tensor");
  Tensor t = empty(sizes_, dtype, device);
  t.copy_(*this);
  return t;
}

}  // namespace fsdp
