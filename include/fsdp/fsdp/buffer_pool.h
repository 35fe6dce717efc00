// The FSDP engine's reusable full-unit buffers: "freeing" a gathered unit returns its
// buffer here, so after the first step the engine allocates nothing (a caching allocator
// in miniature). Every buffer of a dtype has the same capacity, the largest extent the
// engine ever needs in that dtype (floats: the largest padded trainable unit; bytes: the
// largest padded frozen unit), so any free one fits any request. A buffer in use is
// counted under the category of its use (engine_categories.h), an idle one as the pool's
// idle cache, so a memory snapshot shows what the buffers hold at its moment.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp/core/memory_category.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

class BufferPool {
 public:
  struct Buffer {
    Tensor t;  // 1-D, the dtype's capacity
    bool in_use = false;
  };

  // float_capacity: elements of every floating-point buffer; byte_capacity: of every uint8 one.
  BufferPool(Device device, int64_t float_capacity, int64_t byte_capacity)
      : device_(device), float_capacity_(float_capacity), byte_capacity_(byte_capacity) {}

  // A free buffer of `dtype` (allocated on first need), marked in use and counted as `use`.
  Buffer* acquire(DType dtype, memory::Category use);
  // Back to the pool (counted as idle); b becomes null. Null is fine.
  void release(Buffer*& b);
  // Bytes of every buffer the pool holds, in use or idle (it never gives one back).
  uint64_t bytes() const;

 private:
  Device device_;
  int64_t float_capacity_, byte_capacity_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace fsdp
