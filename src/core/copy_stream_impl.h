// Inside core: the device side of CopyStream (fsdp/core/copy_stream.h). The CPU's is in
// copy_stream.cpp; the CUDA backend's in cuda/cuda_copy_stream.cpp.
#pragma once

#include "fsdp/core/copy_stream.h"

namespace fsdp {

struct CopyStream::Impl {
  virtual ~Impl() = default;
  virtual void record_on_compute(int e) = 0;
  virtual void record_on_copy(int e) = 0;
  virtual void copy_waits(int e) = 0;
  virtual void compute_waits(int e) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void synchronize() = 0;
  virtual Tensor host_empty(const Dims& sizes, DType dtype) = 0;
};

#if defined(FSDP_WITH_CUDA)
namespace cuda {
std::unique_ptr<CopyStream::Impl> make_copy_stream(int device, int events);
MemoryStats pinned_arena_stats();
}  // namespace cuda
#endif

}  // namespace fsdp
