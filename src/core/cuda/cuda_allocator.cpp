// The CUDA device allocator behind Tensor storage on cuda:N (host code). Stream-ordered:
// cudaMallocAsync / cudaFreeAsync on the thread's current stream for the device (Note
// [CUDA current stream] in fsdp/core/cuda.h), from the device's default memory pool with
// its release threshold raised to "keep everything", so that after the first step a freed
// block is reused without a trip to the driver (what PyTorch's caching allocator does,
// done by the driver). The same byte accounting as the host allocator feeds the step log;
// running out of memory names the request, what tensors hold and what the pool holds.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "fsdp/core/allocator.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/error.h"

namespace fsdp {
namespace {

#if defined(FSDP_CUDA_EMULATION)
constexpr bool kEmulated = true;
const char* detail() { return fsdpEmuLastErrorDetail(); }
#else
constexpr bool kEmulated = false;
const char* detail() { return ""; }
#endif

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {
    cuda::DeviceGuard guard(index_);
    FSDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, index_));
    uint64_t keep = UINT64_MAX;
    FSDP_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    cuda::DeviceGuard guard(index_);
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, nbytes, stream());
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      uint64_t used = 0, reserved = 0;
      (void)cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used);
      (void)cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved);
      size_t free = 0, total = 0;
      (void)cudaMemGetInfo(&free, &total);
      FSDP_FAIL(
          "cuda:{} out of memory allocating {} bytes: tensors hold {} bytes (peak {}), the memory pool has {} bytes in "
          "use and {} reserved, the device has {} of {} bytes free",
          index_, nbytes, stats().current_bytes, stats().peak_bytes, used, reserved, free, total);
    }
    FSDP_CUDA_CHECK(err);
    record_alloc(nbytes);
    return p;
  }

  // Never throws (Storage's destructor calls it): a failed free is reported, and ignored
  // at process exit, when the runtime may already be unloading.
  void deallocate(void* p, size_t nbytes) override {
    if (p == nullptr) return;
    int previous = -1;
    (void)cudaGetDevice(&previous);
    if (previous != index_) (void)cudaSetDevice(index_);
    const cudaError_t err = cudaFreeAsync(p, stream());
    if (previous != index_ && previous >= 0) (void)cudaSetDevice(previous);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "fsdp_train: cudaFreeAsync(%p) of %zu bytes on cuda:%d failed: %s (%s)%s%s\n", p, nbytes,
                   index_, cudaGetErrorString(err), cudaGetErrorName(err), kEmulated ? "; emulator: " : "", detail());
    }
    record_free(nbytes);
  }

  Device device() const override { return Device::cuda(index_); }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(cuda::current_stream(index_)); }

  int index_;
  cudaMemPool_t pool_ = nullptr;
};

Allocator* cuda_allocator(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaAllocator>> per_device;
  std::lock_guard<std::mutex> lock(mu);
  if (index >= 0 && index < int(per_device.size()) && per_device[size_t(index)]) return per_device[size_t(index)].get();
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    FSDP_FAIL("device cuda:{} requested but no CUDA device is usable: cudaGetDeviceCount failed: {} ({})", index,
              cudaGetErrorString(err), cudaGetErrorName(err));
  }
  FSDP_CHECK(index >= 0 && index < count, "device cuda:{} requested but only {} CUDA device(s) are visible", index,
             count);
  if (int(per_device.size()) <= index) per_device.resize(size_t(index) + 1);
  per_device[size_t(index)] = std::make_unique<CudaAllocator>(index);
  return per_device[size_t(index)].get();
}

[[maybe_unused]] const bool registered = (register_allocator(DeviceType::CUDA, &cuda_allocator), true);

}  // namespace
}  // namespace fsdp
