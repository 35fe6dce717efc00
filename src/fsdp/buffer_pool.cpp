#include "fsdp/fsdp/buffer_pool.h"

namespace fsdp {

BufferPool::Buffer* BufferPool::acquire(DType dtype) {
  for (auto& b : buffers_) {
    if (!b->in_use && b->t.dtype() == dtype) {
      b->in_use = true;
      return b.get();
    }
  }
  buffers_.push_back(std::make_unique<Buffer>());
  buffers_.back()->t = Tensor::empty({dtype == DType::U8 ? byte_capacity_ : float_capacity_}, dtype, device_);
  buffers_.back()->in_use = true;
  return buffers_.back().get();
}

void BufferPool::release(Buffer*& b) {
  if (b == nullptr) return;
  b->in_use = false;
  b = nullptr;
}

}  // namespace fsdp
