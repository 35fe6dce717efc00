#include "fsdp/core/tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "fsdp/ops/elementwise.h"  // fill_ and cast on device tensors (Note [Tensor copies across devices])
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp {

// ---------------------------------------------------------------- Dims
Dims::Dims(std::initializer_list<int64_t> v) {
  FSDP_CHECK(v.size() <= size_t(kMaxDims), "at most {} dimensions, got {}", kMaxDims, v.size());
  for (int64_t x : v) v_[n_++] = x;
}

void Dims::push_back(int64_t x) {
  FSDP_CHECK(n_ < kMaxDims, "at most {} dimensions", kMaxDims);
  v_[n_++] = x;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= v_[i];
  return n;
}

bool Dims::operator==(const Dims& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (v_[i] != o.v_[i]) return false;
  return true;
}

std::string Dims::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(v_[i]);
  return s + "]";
}

Dims contiguous_strides(const Dims& sizes) {
  Dims st = sizes;
  int64_t acc = 1;
  for (int i = sizes.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= sizes[i];
  }
  return st;
}

// ---------------------------------------------------------------- Storage
Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(size_t nbytes, Allocator& allocator)
    : nbytes_(nbytes), device_(allocator.device()), allocator_(&allocator) {
  data_ = allocator_->allocate(nbytes);
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  return s;
}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->deallocate(data_, nbytes_);
}

// ---------------------------------------------------------------- Tensor
Tensor Tensor::contiguous_meta(const Dims& sizes, DType dtype, Device device) {
  for (int64_t s : sizes) FSDP_CHECK(s >= 0, "negative extent in shape {}", sizes.str());
  Tensor t;
  t.sizes_ = sizes;
  t.strides_ = contiguous_strides(sizes);
  t.dtype_ = dtype;
  t.device_ = device;
  t.defined_ = true;
  t.recompute();
  return t;
}

Tensor Tensor::empty(const Dims& sizes, DType dtype, Device device) {
  Tensor t = contiguous_meta(sizes, dtype, device);
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::empty(const Dims& sizes, DType dtype, Allocator& allocator) {
  Tensor t = contiguous_meta(sizes, dtype, allocator.device());
  t.storage_ = std::make_shared<Storage>(t.nbytes(), allocator);
  return t;
}

Tensor Tensor::zeros(const Dims& sizes, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  t.fill_(0.0);
  return t;
}

Tensor Tensor::from_blob(void* data, const Dims& sizes, DType dtype, Device device) {
  Tensor t = contiguous_meta(sizes, dtype, device);
  t.storage_ = Storage::wrap(data, t.nbytes(), device);
  return t;
}

void Tensor::recompute() {
  numel_ = sizes_.numel();
  int64_t expect = 1;
  contiguous_ = true;
  for (int i = sizes_.size() - 1; i >= 0; --i) {
    if (sizes_[i] != 1 && strides_[i] != expect) contiguous_ = false;
    expect *= sizes_[i];
  }
  // An empty view (e.g. narrow(1, k, 0) of a matrix) holds no elements to be out of
  // place; calling it non-contiguous would make ops reject an empty shard or batch.
  if (numel_ == 0) contiguous_ = true;
}

int Tensor::wrap_dim(int d) const {
  const int n = dim();
  FSDP_CHECK(d >= -n && d < n, "dimension {} out of range for tensor {}", d, str());
  return d < 0 ? d + n : d;
}

void* Tensor::data_ptr() const {
  FSDP_CHECK(defined_, "data of an undefined tensor");
  if (storage_ == nullptr) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(element_size());
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  d = wrap_dim(d);
  FSDP_CHECK(start >= 0 && length >= 0 && start + length <= sizes_[d],
             "narrow({}, {}, {}) out of range for tensor {}", d, start, length, str());
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.sizes_[d] = length;
  t.recompute();
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d);
  FSDP_CHECK(step > 0, "slice step must be positive, got {}", step);
  FSDP_CHECK(start >= 0 && start <= end && end <= sizes_[d], "slice({}, {}, {}) out of range for tensor {}", d,
             start, end, str());
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.sizes_[d] = (end - start + step - 1) / step;
  t.strides_[d] *= step;
  t.recompute();
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  d = wrap_dim(d);
  FSDP_CHECK(index >= 0 && index < sizes_[d], "select({}, {}) out of range for tensor {}", d, index, str());
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  Dims sz, st;
  for (int i = 0; i < dim(); ++i) {
    if (i == d) continue;
    sz.push_back(sizes_[i]);
    st.push_back(strides_[i]);
  }
  t.sizes_ = sz;
  t.strides_ = st;
  t.recompute();
  return t;
}

Tensor Tensor::reshape(const Dims& sizes) const {
  FSDP_CHECK(contiguous_, "reshape of non-contiguous tensor {} (make a contiguous copy first)", str());
  Dims out = sizes;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      FSDP_CHECK(infer < 0, "reshape to {}: only one extent may be -1", sizes.str());
      infer = i;
    } else {
      FSDP_CHECK(out[i] >= 0, "reshape to {}: negative extent", sizes.str());
      known *= out[i];
    }
  }
  if (infer >= 0) {
    FSDP_CHECK(known > 0 && numel_ % known == 0, "cannot reshape tensor {} to {}", str(), sizes.str());
    out[infer] = numel_ / known;
  }
  FSDP_CHECK(out.numel() == numel_, "cannot reshape tensor {} to {}: element counts differ", str(), sizes.str());
  Tensor t = *this;
  t.sizes_ = out;
  t.strides_ = contiguous_strides(out);
  t.recompute();
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  d0 = wrap_dim(d0);
  d1 = wrap_dim(d1);
  Tensor t = *this;
  std::swap(t.sizes_[d0], t.sizes_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  t.recompute();
  return t;
}

Tensor Tensor::unflatten(int d, int64_t a, int64_t b) const {
  d = wrap_dim(d);
  FSDP_CHECK(a >= 0 && b >= 0 && a * b == sizes_[d], "unflatten dimension {} of tensor {} into [{}, {}]", d, str(), a,
             b);
  Tensor t = *this;
  Dims sz, st;
  for (int i = 0; i < dim(); ++i) {
    if (i == d) {
      sz.push_back(a);
      st.push_back(b * strides_[i]);
      sz.push_back(b);
      st.push_back(strides_[i]);
    } else {
      sz.push_back(sizes_[i]);
      st.push_back(strides_[i]);
    }
  }
  t.sizes_ = sz;
  t.strides_ = st;
  t.recompute();
  return t;
}

void* Tensor::element_ptr(std::initializer_list<int64_t> idx, DType expect) const {
  FSDP_CHECK(defined_, "element access on an undefined tensor");
  FSDP_CHECK(device_.is_cpu(), "element access on tensor {}: only CPU tensors", str());
  FSDP_CHECK(expect == dtype_, "tensor {} accessed as {}", str(), dtype_name(expect));
  FSDP_CHECK(int(idx.size()) == dim(), "index with {} components into tensor {}", idx.size(), str());
  int64_t off = offset_;
  int d = 0;
  for (int64_t i : idx) {
    FSDP_CHECK(i >= 0 && i < sizes_[d], "index {} out of range for dimension {} of tensor {}", i, d, str());
    off += i * strides_[d];
    ++d;
  }
  return static_cast<char*>(storage_->data()) + off * int64_t(element_size());
}

double Tensor::get(std::initializer_list<int64_t> idx) const { return load_as_double(element_ptr(idx, dtype_), dtype_); }

void Tensor::set(std::initializer_list<int64_t> idx, double v) const { store_from_double(element_ptr(idx, dtype_), dtype_, v); }

int64_t Tensor::linear_to_offset(int64_t linear) const {
  FSDP_CHECK(linear >= 0 && linear < numel_, "flat index {} out of range for tensor {}", linear, str());
  int64_t off = offset_;
  for (int d = dim() - 1; d >= 0; --d) {
    off += (linear % sizes_[d]) * strides_[d];
    linear /= sizes_[d];
  }
  return off;
}

double Tensor::get_flat(int64_t linear) const {
  FSDP_CHECK(device_.is_cpu(), "element access on tensor {}: only CPU tensors", str());
  const int64_t off = linear_to_offset(linear);
  return load_as_double(static_cast<char*>(storage_->data()) + off * int64_t(element_size()), dtype_);
}

void Tensor::set_flat(int64_t linear, double v) const {
  FSDP_CHECK(device_.is_cpu(), "element access on tensor {}: only CPU tensors", str());
  const int64_t off = linear_to_offset(linear);
  store_from_double(static_cast<char*>(storage_->data()) + off * int64_t(element_size()), dtype_, v);
}

// Note [Tensor copies across devices]
// fill_, copy_, clone and to work on every device, so model and test code never branch on
// it. Host-only tensors keep the element loops below. A CUDA tensor goes through the
// backend: fill_ through the op set's fill kernel, copies through cuda::copy (one
// cudaMemcpyAsync on the current stream of the device involved, Note [CUDA current
// stream]) and conversions through the cast kernel. Layouts: a strided tensor is cut into
// runs that are contiguous in both tensors (the innermost dimensions that are packed in
// both), one copy or fill per run; so a row-strided view (a column block of a matrix)
// costs one call per row, and a transposed one a call per element: correct, but meant for
// set-up and tests, not for a step. Copies into host memory return once the data is
// there (cuda::copy synchronises); the others are stream-ordered, like a kernel.
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
    if (contiguous_) {
      fsdp::fill_(*this, v);
      return;
    }
    for_each_run(*this, *this, [&](int64_t o, int64_t, int64_t len) { fsdp::fill_(run_view(*this, o, len), v); });
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
        cast(packed, *this);
      } else {
        Tensor converted = empty(sizes_, dtype_, src.device_);
        cast(packed, converted);
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

std::string Tensor::str() const {
  if (!defined_) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(dtype_), sizes_.str(), device_.str());
}

// ---------------------------------------------------------------- checks
void check_defined(const Tensor& t, const char* what) {
  FSDP_CHECK(t.defined(), "{} is an undefined tensor", what);
}

void check_dtype(const Tensor& t, DType dtype, const char* what) {
  check_defined(t, what);
  FSDP_CHECK(t.dtype() == dtype, "{} must be {}, got {}", what, dtype_name(dtype), t.str());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* wa, const char* wb) {
  check_defined(a, wa);
  check_defined(b, wb);
  FSDP_CHECK(a.dtype() == b.dtype(), "{} ({}) and {} ({}) must have the same dtype", wa, a.str(), wb, b.str());
}

void check_same_device(const Tensor& a, const Tensor& b, const char* wa, const char* wb) {
  check_defined(a, wa);
  check_defined(b, wb);
  FSDP_CHECK(a.device() == b.device(), "{} ({}) and {} ({}) must be on the same device", wa, a.str(), wb, b.str());
}

void check_shape(const Tensor& t, const Dims& expected, const char* what) {
  check_defined(t, what);
  FSDP_CHECK(t.sizes() == expected, "{} must have shape {}, got {}", what, expected.str(), t.str());
}

void check_dim(const Tensor& t, int d, const char* what) {
  check_defined(t, what);
  FSDP_CHECK(t.dim() == d, "{} must have {} dimensions, got {}", what, d, t.str());
}

void check_contiguous(const Tensor& t, const char* what) {
  check_defined(t, what);
  FSDP_CHECK(t.is_contiguous(), "{} must be contiguous, got {} with strides {}", what, t.str(), t.strides().str());
}

void check_rows_packed(const Tensor& t, const char* what) {
  check_defined(t, what);
  FSDP_CHECK(t.rows_packed(), "{} must have a packed last dimension, got {} with strides {}", what, t.str(),
             t.strides().str());
}

}  // namespace fsdp
