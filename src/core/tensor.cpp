#include "fsdp/core/tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

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
Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), category_(memory::current_category()) {
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate_as(nbytes, category_);
}

Storage::Storage(size_t nbytes, Allocator& allocator)
    : nbytes_(nbytes), device_(allocator.device()), allocator_(&allocator), category_(memory::current_category()) {
  data_ = allocator_->allocate_as(nbytes, category_);
}

void Storage::set_category(memory::Category c) {
  if (allocator_ != nullptr) allocator_->recategorize(nbytes_, category_, c);
  category_ = c;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  return s;
}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->deallocate_as(data_, nbytes_, category_);
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

Tensor Tensor::reinterpret(DType dtype, int64_t byte_offset, const Dims& sizes) const {
  FSDP_CHECK(contiguous_, "reinterpret of non-contiguous tensor {}", str());
  for (int64_t s : sizes) FSDP_CHECK(s >= 0, "reinterpret to negative extent {}", sizes.str());
  const int64_t es = int64_t(dtype_size(dtype));
  const int64_t bytes = sizes.numel() * es;
  FSDP_CHECK(byte_offset >= 0 && byte_offset + bytes <= int64_t(nbytes()),
             "reinterpret: {} {} at byte {} runs past the {} bytes of {}", dtype_name(dtype), sizes.str(), byte_offset,
             nbytes(), str());
  const int64_t start = offset_ * int64_t(element_size()) + byte_offset;  // from the storage's first byte
  FSDP_CHECK(start % es == 0, "reinterpret: {} at storage byte {} is not aligned to its {} bytes", dtype_name(dtype),
             start, es);
  Tensor t = *this;
  t.dtype_ = dtype;
  t.offset_ = start / es;
  t.sizes_ = sizes;
  t.strides_ = contiguous_strides(sizes);
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
