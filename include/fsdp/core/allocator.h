// Per-device allocators behind tensor storage. Each counts the bytes it holds and its
// peak, which the step log reports and the FSDP tests hold to 1/N scaling.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "fsdp/core/device.h"

namespace fsdp {

struct MemoryStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  size_t num_allocs = 0;  // total allocate() calls since start
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;

  MemoryStats stats() const;
  void reset_peak();

 protected:
  void record_alloc(size_t nbytes);
  void record_free(size_t nbytes);

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<size_t> allocs_{0};
};

// The allocator for a device. CPU always exists; CUDA exists once a CUDA backend has
// registered one, otherwise this throws a clear error naming the device.
Allocator& allocator_for(Device d);
// Another host allocator like allocator_for(cpu), counting only its own bytes (the
// offloaded activations' arena, apart from the CPU backend's "device" memory).
std::unique_ptr<Allocator> new_host_allocator();
void register_allocator(DeviceType type, Allocator* (*factory)(int index));

}  // namespace fsdp
