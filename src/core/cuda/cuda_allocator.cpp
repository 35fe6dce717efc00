// The CUDA device allocator (host code: compiled by the host compiler, links cudart) behind Tensor storage on cuda:N. For now plain cudaMalloc
// per device with the same byte accounting as the host allocator; the stream-ordered
// pool (cudaMallocAsync) arrives with the CUDA backend's streams. Registered at start-up
// so that allocator_for(cuda:N) exists in a CUDA build; without a usable device it fails
// with the CUDA runtime's own message naming the device.
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "fsdp/core/allocator.h"
#include "fsdp/core/error.h"

namespace fsdp {
namespace {

#define FSDP_CUDA_CHECK(call, ...)                                                                    \
  do {                                                                                                \
    const cudaError_t fsdp_err_ = (call);                                                             \
    FSDP_CHECK(fsdp_err_ == cudaSuccess, "{}: {} failed: {} ({})", fmt::format(__VA_ARGS__), #call, \
               cudaGetErrorString(fsdp_err_), cudaGetErrorName(fsdp_err_));                          \
  } while (0)

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    FSDP_CUDA_CHECK(cudaSetDevice(index_), "cuda:{}", index_);
    void* p = nullptr;
    FSDP_CUDA_CHECK(cudaMalloc(&p, nbytes), "cuda:{} allocating {} bytes ({} bytes already held)", index_, nbytes,
                    stats().current_bytes);
    record_alloc(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (p == nullptr) return;
    cudaSetDevice(index_);
    cudaFree(p);  // errors at teardown (driver already unloading) are not actionable
    record_free(nbytes);
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

Allocator* cuda_allocator(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaAllocator>> per_device;
  std::lock_guard<std::mutex> lock(mu);
  if (index < int(per_device.size()) && per_device[size_t(index)]) return per_device[size_t(index)].get();
  int count = 0;
  FSDP_CUDA_CHECK(cudaGetDeviceCount(&count), "device cuda:{} requested but no CUDA device is usable", index);
  FSDP_CHECK(index >= 0 && index < count, "device cuda:{} requested but only {} CUDA device(s) are visible", index,
             count);
  if (int(per_device.size()) <= index) per_device.resize(size_t(index) + 1);
  per_device[size_t(index)] = std::make_unique<CudaAllocator>(index);
  return per_device[size_t(index)].get();
}

[[maybe_unused]] const bool registered = (register_allocator(DeviceType::CUDA, &cuda_allocator), true);

}  // namespace
}  // namespace fsdp
