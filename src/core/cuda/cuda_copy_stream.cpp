// CopyStream on a CUDA device (host code): a non-blocking stream of its own, events created
// once with timing off, copies as cudaMemcpyAsync between device memory and page-locked
// host memory. See Note [Copy stream ordering] in fsdp/core/copy_stream.h.
#include <cuda_runtime.h>

#include <vector>

#include "../copy_stream_impl.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"

namespace fsdp::cuda {
namespace {

// Page-locked host memory for offloaded activations, counted apart from pinned_empty's.
Allocator& pinned_arena() {
  static Allocator* arena = new_pinned_allocator().release();  // outlives every tensor
  return *arena;
}

class CudaCopyStream final : public CopyStream::Impl {
 public:
  CudaCopyStream(int device, int events) : device_(device), events_(size_t(events), nullptr) {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : events_) FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaCopyStream() override {
    // Never throws: pending copies finish first (their buffers are about to be freed).
    int previous = -1;
    (void)cudaGetDevice(&previous);
    (void)cudaSetDevice(device_);
    (void)cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    (void)cudaStreamDestroy(stream_);
    if (previous >= 0) (void)cudaSetDevice(previous);
  }

  void record_on_compute(int e) override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaEventRecord(event(e), compute()));
  }
  void record_on_copy(int e) override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaEventRecord(event(e), stream_));
  }
  void copy_waits(int e) override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, event(e), 0));
  }
  void compute_waits(int e) override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaStreamWaitEvent(compute(), event(e), 0));
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    FSDP_CHECK(src.device().is_cpu() != dst.device().is_cpu(),
               "CopyStream::copy from {} to {}: one side on the host, the other on cuda:{}", src.device().str(),
               dst.device().str(), device_);
    if (src.numel() == 0) return;
    DeviceGuard guard(device_);
    const cudaMemcpyKind kind = src.device().is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    FSDP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), kind, stream_));
  }
  void synchronize() override {
    DeviceGuard guard(device_);
    FSDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  Tensor host_empty(const Dims& sizes, DType dtype) override { return Tensor::empty(sizes, dtype, pinned_arena()); }

 private:
  cudaStream_t compute() const { return static_cast<cudaStream_t>(current_stream(device_)); }
  cudaEvent_t event(int e) const {
    FSDP_CHECK(e >= 0 && e < int(events_.size()), "copy stream event {} of {}", e, events_.size());
    return events_[size_t(e)];
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<CopyStream::Impl> make_copy_stream(int device, int events) {
  return std::make_unique<CudaCopyStream>(device, events);
}

MemoryStats pinned_arena_stats() { return pinned_arena().stats(); }

}  // namespace fsdp::cuda
