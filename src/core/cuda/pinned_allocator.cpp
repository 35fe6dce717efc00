// Page-locked host memory behind fsdp::cuda::pinned_empty (host code). Small and rare
// allocations (the loader's batch staging, checkpoint mirrors), so each is one
// cudaMallocHost / cudaFreeHost with no caching: both calls are slow (they map pages for
// DMA) but happen once per run.
#include <cuda_runtime.h>

#include "fsdp/core/allocator.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"

namespace fsdp::cuda {
namespace {

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, nbytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      FSDP_FAIL("cudaMallocHost of {} bytes of page-locked host memory failed: {} ({} bytes of host tensors held)",
                nbytes, cudaGetErrorString(err), stats().current_bytes);
    }
    record_alloc(nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    (void)cudaFreeHost(ptr);  // teardown errors (driver unloading) are not actionable
    record_free(nbytes);
  }
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu (page-locked)"; }
};

}  // namespace

std::unique_ptr<Allocator> new_pinned_allocator() { return std::make_unique<PinnedAllocator>(); }

Tensor pinned_empty(const Dims& sizes, DType dtype) {
  static PinnedAllocator* allocator = new PinnedAllocator();  // outlives every tensor (never destroyed)
  return Tensor::empty(sizes, dtype, *allocator);
}

}  // namespace fsdp::cuda
