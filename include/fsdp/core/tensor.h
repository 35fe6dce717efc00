// Tensor: a typed, strided view of ref-counted storage on one device, in the spirit of
// PyTorch's TensorImpl: storage + sizes + strides + element offset + dtype, nothing more.
// Views (narrow, slice, select, reshape of contiguous, transpose) share storage. Sizes
// and strides live inline (at most kMaxDims), so making a view never touches the heap:
// the training step creates views freely and still allocates nothing after step one.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "fsdp/core/allocator.h"
#include "fsdp/core/device.h"
#include "fsdp/core/dtype.h"
#include "fsdp/core/error.h"

namespace fsdp {

constexpr int kMaxDims = 6;

// A short list of extents (or strides) kept inline.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v);
  int size() const { return n_; }
  int64_t operator[](int i) const { return v_[i]; }
  int64_t& operator[](int i) { return v_[i]; }
  const int64_t* begin() const { return v_.data(); }
  const int64_t* end() const { return v_.data() + n_; }
  void push_back(int64_t x);
  int64_t numel() const;
  bool operator==(const Dims& o) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> v_{};
  int n_ = 0;
};

class Storage {
 public:
  // Owned memory from the device's allocator.
  Storage(size_t nbytes, Device device);
  // Owned memory from a particular allocator (e.g. page-locked host memory for copies to a
  // GPU, fsdp/core/cuda.h's pinned_empty); freed back to it.
  Storage(size_t nbytes, Allocator& allocator);
  // Memory owned by someone else (an mmap'd file, a caller's buffer); never freed here.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // What the memory is for (fsdp/core/memory_category.h): the thread's category when it was
  // allocated, until set_category moves it (a pooled buffer taking a new use).
  memory::Category category() const { return category_; }
  void set_category(memory::Category c);

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null when not owned
  memory::Category category_ = memory::kOther;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  static Tensor empty(const Dims& sizes, DType dtype, Device device = Device::cpu());
  static Tensor empty(const Dims& sizes, DType dtype, Allocator& allocator);  // on allocator.device()
  static Tensor zeros(const Dims& sizes, DType dtype, Device device = Device::cpu());
  // A view of memory the caller keeps alive (e.g. an mmap'd checkpoint).
  static Tensor from_blob(void* data, const Dims& sizes, DType dtype, Device device = Device::cpu());

  bool defined() const { return defined_; }
  int dim() const { return sizes_.size(); }
  const Dims& sizes() const { return sizes_; }
  const Dims& strides() const { return strides_; }
  int64_t size(int d) const { return sizes_[wrap_dim(d)]; }
  int64_t stride(int d) const { return strides_[wrap_dim(d)]; }
  int64_t numel() const { return numel_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return size_t(numel_) * element_size(); }
  bool is_contiguous() const { return contiguous_; }
  // True when the last dimension is packed (stride 1) and each row may be strided: the
  // layout every row-wise kernel accepts, so fused projections can be split by views.
  bool rows_packed() const { return dim() >= 1 && (stride(-1) == 1 || size(-1) == 1); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data_ptr() const;
  template <typename T>
  T* data() const {
    FSDP_CHECK(dtype_of<T> == dtype_, "tensor {} accessed as {}", str(), dtype_name(dtype_of<T>));
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage) ----
  Tensor narrow(int d, int64_t start, int64_t length) const;
  Tensor slice(int d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int d, int64_t index) const;  // drops dimension d
  Tensor reshape(const Dims& sizes) const;    // contiguous only; one extent may be -1
  Tensor transpose(int d0, int d1) const;
  // Splits dimension d (extent a*b) into [a, b]; valid for any stride, so a column
  // range of a fused buffer can be viewed as [.., heads, head_dim].
  Tensor unflatten(int d, int64_t a, int64_t b) const;
  Tensor flatten() const { return reshape({numel_}); }
  // A contiguous view of `sizes` elements of `dtype` over this contiguous tensor's bytes,
  // starting `byte_offset` bytes in (a multiple of dtype's size from the storage start): how
  // one byte buffer holds pieces of several dtypes (a frozen unit: NF4 codes, float32
  // statistics and norm weights side by side). Errors past the end or misaligned.
  Tensor reinterpret(DType dtype, int64_t byte_offset, const Dims& sizes) const;

  // ---- element access for tests and small host-side work (CPU tensors only) ----
  template <typename T>
  T& at(std::initializer_list<int64_t> idx) const {
    return *static_cast<T*>(element_ptr(idx, dtype_of<T>));
  }
  double get(std::initializer_list<int64_t> idx) const;  // any dtype, as double
  void set(std::initializer_list<int64_t> idx, double v) const;
  double get_flat(int64_t linear) const;  // row-major logical index
  void set_flat(int64_t linear, double v) const;

  // ---- whole-tensor operations on any device (Note [Tensor copies across devices]) ----
  void fill_(double v) const;
  void zero_() const { fill_(0.0); }
  void copy_(const Tensor& src) const;  // same shape, any dtypes, any strides, any devices
  Tensor clone() const;                 // contiguous copy on the same device
  Tensor to(DType dtype) const;         // contiguous copy converted, on the same device
  Tensor to(Device device) const;       // contiguous copy on `device`
  Tensor to(Device device, DType dtype) const;

  std::string str() const;  // "float32[2, 3] on cpu"

 private:
  // A defined, contiguous tensor of that shape with no storage yet (empty / from_blob).
  static Tensor contiguous_meta(const Dims& sizes, DType dtype, Device device);
  int wrap_dim(int d) const;
  void* element_ptr(std::initializer_list<int64_t> idx, DType expect) const;
  int64_t linear_to_offset(int64_t linear) const;
  void recompute();

  std::shared_ptr<Storage> storage_;
  Dims sizes_, strides_;
  int64_t offset_ = 0;  // in elements
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  Device device_;
  bool contiguous_ = true;
  bool defined_ = false;
};

Dims contiguous_strides(const Dims& sizes);

// Precondition checks with uniform messages; `what` names the argument ("x", "weight").
void check_defined(const Tensor& t, const char* what);
void check_dtype(const Tensor& t, DType dtype, const char* what);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b);
void check_same_device(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b);
void check_shape(const Tensor& t, const Dims& expected, const char* what);
void check_dim(const Tensor& t, int dim, const char* what);
void check_contiguous(const Tensor& t, const char* what);
void check_rows_packed(const Tensor& t, const char* what);

}  // namespace fsdp
