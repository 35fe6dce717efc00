// CopyStream on the CPU backend (copies at once, events do nothing) and the dispatch to
// the CUDA backend's; see fsdp/core/copy_stream.h.
#include "fsdp/core/copy_stream.h"

#include "copy_stream_impl.h"
#include "fsdp/core/error.h"

namespace fsdp {
namespace {

// Host memory the offloaded activations wait in on the CPU backend: a heap of its own, so
// that allocator_for(cpu), which stands for the CPU "device", does not count it.
Allocator& host_arena() {
  static Allocator* arena = new_host_allocator().release();  // outlives every tensor
  return *arena;
}

class CpuCopyStream final : public CopyStream::Impl {
 public:
  void record_on_compute(int) override {}
  void record_on_copy(int) override {}
  void copy_waits(int) override {}
  void compute_waits(int) override {}
  void copy(const Tensor& src, const Tensor& dst) override { dst.copy_(src); }
  void synchronize() override {}
  Tensor host_empty(const Dims& sizes, DType dtype) override { return Tensor::empty(sizes, dtype, host_arena()); }
};

}  // namespace

CopyStream::CopyStream(Device device, int events) : device_(device) {
  FSDP_CHECK(events >= 0, "CopyStream with {} events", events);
  if (device.is_cpu()) {
    impl_ = std::make_unique<CpuCopyStream>();
    return;
  }
#if defined(FSDP_WITH_CUDA)
  impl_ = cuda::make_copy_stream(device.index, events);
#else
  FSDP_FAIL("a copy stream on {} needs the CUDA backend", device.str());
#endif
}

CopyStream::~CopyStream() = default;

void CopyStream::record_on_compute(int e) { impl_->record_on_compute(e); }
void CopyStream::record_on_copy(int e) { impl_->record_on_copy(e); }
void CopyStream::copy_waits(int e) { impl_->copy_waits(e); }
void CopyStream::compute_waits(int e) { impl_->compute_waits(e); }
void CopyStream::synchronize() { impl_->synchronize(); }
Tensor CopyStream::host_empty(const Dims& sizes, DType dtype) const { return impl_->host_empty(sizes, dtype); }

void CopyStream::copy(const Tensor& src, const Tensor& dst) {
  FSDP_CHECK(src.sizes() == dst.sizes() && src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous(),
             "CopyStream::copy from {} into {}: contiguous tensors of one shape and dtype", src.str(), dst.str());
  impl_->copy(src, dst);
}

MemoryStats CopyStream::host_stats() {
  MemoryStats s = host_arena().stats();
#if defined(FSDP_WITH_CUDA)
  const MemoryStats pinned = cuda::pinned_arena_stats();
  s.current_bytes += pinned.current_bytes;
  s.peak_bytes += pinned.peak_bytes;
  s.num_allocs += pinned.num_allocs;
#endif
  return s;
}

}  // namespace fsdp
