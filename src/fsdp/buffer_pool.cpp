#include "fsdp/fsdp/buffer_pool.h"

#include "fsdp/fsdp/engine_categories.h"

namespace fsdp {

BufferPool::Buffer* BufferPool::acquire(DType dtype, memory::Category use) {
  for (auto& b : buffers_) {
    if (!b->in_use && b->t.dtype() == dtype) {
      b->in_use = true;
      b->t.storage()->set_category(use);
      return b.get();
    }
  }
  buffers_.push_back(std::make_unique<Buffer>());
  {
    const memory::CategoryScope tag(use);
    buffers_.back()->t = Tensor::empty({dtype == DType::U8 ? byte_capacity_ : float_capacity_}, dtype, device_);
  }
  buffers_.back()->in_use = true;
  return buffers_.back().get();
}

void BufferPool::release(Buffer*& b) {
  if (b == nullptr) return;
  b->in_use = false;
  b->t.storage()->set_category(engine_category::idle_pool());
  b = nullptr;
}

uint64_t BufferPool::bytes() const {
  uint64_t n = 0;
  for (const auto& b : buffers_) n += b->t.nbytes();
  return n;
}

}  // namespace fsdp
