// Per-device allocators behind tensor storage. Each counts the bytes it holds and its
// peak, which the step log reports and the FSDP tests hold to 1/N scaling, and splits the
// bytes by what they are for (fsdp/core/memory_category.h): the memory snapshot
// (logging.memory_snapshot_step) and the step line's "most: <category>" read that split.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/core/device.h"
#include "fsdp/core/memory_category.h"

namespace fsdp {

struct MemoryStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  size_t num_allocs = 0;  // total allocate() calls since start
};

// The allocator's live allocations by category at one moment. The categories add up to
// bytes_in_use: both are read under the allocator's lock.
struct MemorySnapshot {
  struct Entry {
    memory::Category category = memory::kOther;
    uint64_t bytes = 0;
    uint64_t allocations = 0;  // live allocations in the category
  };
  uint64_t bytes_in_use = 0;  // everything the allocator holds (what stats().current_bytes says)
  uint64_t idle_bytes = 0;    // of which in idle-cache categories
  std::vector<Entry> categories;  // the non-empty ones, by category id
  uint64_t active_bytes() const { return bytes_in_use - idle_bytes; }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  // For messages and trace counters ("cpu", "cuda:0", "cpu (page-locked)").
  virtual std::string name() const { return device().str(); }

  MemoryStats stats() const;
  // Starts a new peak window: the byte peak, and the peak snapshot (below), restart from now.
  void reset_peak();

  // allocate / deallocate with the bytes counted under `category` (what Storage calls; a
  // direct allocate() is counted in the totals but in no category).
  void* allocate_as(size_t nbytes, memory::Category category);
  void deallocate_as(void* ptr, size_t nbytes, memory::Category category);
  // Moves a live allocation's bytes from one category to another.
  void recategorize(size_t nbytes, memory::Category from, memory::Category to);

  MemorySnapshot snapshot() const;  // now
  // The moment since reset_peak() when the bytes in use outside idle caches were highest
  // (the first such moment): PyTorch's max_memory_allocated, with what held them.
  MemorySnapshot peak_snapshot() const;
  // The category group (memory::group_of) holding the most bytes in peak_snapshot(), with
  // those bytes; allocates nothing, so a training step may ask every time.
  std::pair<memory::Category, uint64_t> peak_top_group() const;

 protected:
  void record_alloc(size_t nbytes);
  void record_free(size_t nbytes);

 private:
  // With mu_ held: the categories' totals changed; keeps the peak snapshot and, while a
  // trace records, adds a point to this allocator's memory counter track.
  void categories_changed_locked();
  void trace_counter_locked() const;
  void fill_snapshot_locked(MemorySnapshot& s) const;

  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<size_t> allocs_{0};

  mutable std::mutex mu_;  // the category counters and the peak snapshot
  std::vector<uint64_t> category_bytes_, category_allocs_;  // by category id, grown on demand
  uint64_t idle_bytes_ = 0;
  uint64_t peak_active_ = 0;
  MemorySnapshot peak_snapshot_;
  mutable std::vector<uint64_t> group_scratch_;  // peak_top_group's per-group sums
};

// The allocator for a device. CPU always exists; CUDA exists once a CUDA backend has
// registered one, otherwise this throws a clear error naming the device.
Allocator& allocator_for(Device d);
// Another host allocator like allocator_for(cpu), counting only its own bytes (the
// offloaded activations' arena, apart from the CPU backend's "device" memory).
std::unique_ptr<Allocator> new_host_allocator();
void register_allocator(DeviceType type, Allocator* (*factory)(int index));

}  // namespace fsdp
