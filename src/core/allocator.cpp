#include "fsdp/core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "fsdp/core/error.h"
#include "fsdp/core/trace.h"

namespace fsdp {

MemoryStats Allocator::stats() const {
  return MemoryStats{current_.load(), peak_.load(), allocs_.load()};
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_.store(current_.load());
  peak_active_ = current_.load() - idle_bytes_;
  fill_snapshot_locked(peak_snapshot_);
  if (trace::enabled()) trace_counter_locked();
}

void Allocator::record_alloc(size_t n) {
  const size_t now = current_.fetch_add(n) + n;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocs_.fetch_add(1);
}

void Allocator::record_free(size_t n) { current_.fetch_sub(n); }

// Every category change happens under mu_, together with the allocation or free behind
// it, so a snapshot's categories always add up to its bytes in use.
void* Allocator::allocate_as(size_t nbytes, memory::Category c) {
  std::lock_guard<std::mutex> lock(mu_);
  void* p = allocate(nbytes);
  if (nbytes == 0) return p;
  if (category_bytes_.size() <= c) {
    category_bytes_.resize(size_t(c) + 1, 0);
    category_allocs_.resize(size_t(c) + 1, 0);
  }
  category_bytes_[c] += nbytes;
  category_allocs_[c] += 1;
  if (memory::is_idle_cache(c)) idle_bytes_ += nbytes;
  categories_changed_locked();
  return p;
}

void Allocator::deallocate_as(void* ptr, size_t nbytes, memory::Category c) {
  std::lock_guard<std::mutex> lock(mu_);
  deallocate(ptr, nbytes);
  if (nbytes == 0 || category_bytes_.size() <= c) return;
  category_bytes_[c] -= nbytes;
  category_allocs_[c] -= 1;
  if (memory::is_idle_cache(c)) idle_bytes_ -= nbytes;
  categories_changed_locked();
}

void Allocator::recategorize(size_t nbytes, memory::Category from, memory::Category to) {
  if (from == to || nbytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (category_bytes_.size() <= std::max(from, to)) {
    category_bytes_.resize(size_t(std::max(from, to)) + 1, 0);
    category_allocs_.resize(size_t(std::max(from, to)) + 1, 0);
  }
  category_bytes_[from] -= nbytes;
  category_allocs_[from] -= 1;
  category_bytes_[to] += nbytes;
  category_allocs_[to] += 1;
  if (memory::is_idle_cache(from)) idle_bytes_ -= nbytes;
  if (memory::is_idle_cache(to)) idle_bytes_ += nbytes;
  categories_changed_locked();
}

void Allocator::categories_changed_locked() {
  const uint64_t active = current_.load() - idle_bytes_;
  if (active > peak_active_) {
    peak_active_ = active;
    fill_snapshot_locked(peak_snapshot_);
  }
  if (trace::enabled()) trace_counter_locked();
}

void Allocator::trace_counter_locked() const {
  const uint64_t held = current_.load();
  trace::counter("memory " + name(), {{"in use", double(held - idle_bytes_)}, {"idle cache", double(idle_bytes_)}});
}

// Refills `s` in place: once its vector has grown to the number of categories in use, a
// training step's peak updates allocate nothing (tests/cpu/test_trainer.cpp holds a step
// to zero heap allocations).
void Allocator::fill_snapshot_locked(MemorySnapshot& s) const {
  s.bytes_in_use = current_.load();
  s.idle_bytes = idle_bytes_;
  s.categories.clear();
  for (size_t c = 0; c < category_bytes_.size(); ++c) {
    if (category_allocs_[c] == 0 && category_bytes_[c] == 0) continue;
    s.categories.push_back(MemorySnapshot::Entry{memory::Category(c), category_bytes_[c], category_allocs_[c]});
  }
}

MemorySnapshot Allocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemorySnapshot s;
  fill_snapshot_locked(s);
  return s;
}

MemorySnapshot Allocator::peak_snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_snapshot_;
}

std::pair<memory::Category, uint64_t> Allocator::peak_top_group() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (group_scratch_.size() < category_bytes_.size()) group_scratch_.resize(category_bytes_.size(), 0);
  for (const MemorySnapshot::Entry& e : peak_snapshot_.categories) group_scratch_[memory::group_of(e.category)] += e.bytes;
  std::pair<memory::Category, uint64_t> top{memory::kOther, 0};
  for (const MemorySnapshot::Entry& e : peak_snapshot_.categories) {
    uint64_t& g = group_scratch_[memory::group_of(e.category)];
    if (g > top.second) top = {memory::group_of(e.category), g};
    g = 0;  // each group counted once; the scratch is left zeroed
  }
  return top;
}

namespace {

// 64-byte alignment: whole cache lines and aligned AVX-512 loads for every tensor.
constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    FSDP_CHECK(p != nullptr, "out of host memory allocating {} bytes ({} bytes already held)", nbytes,
               stats().current_bytes);
    record_alloc(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (p == nullptr) return;
    std::free(p);
    record_free(nbytes);
  }
  Device device() const override { return Device::cpu(); }
};

struct Registry {
  std::mutex mu;
  Allocator* (*cuda_factory)(int) = nullptr;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::unique_ptr<Allocator> new_host_allocator() { return std::make_unique<CpuAllocator>(); }

void register_allocator(DeviceType type, Allocator* (*factory)(int)) {
  FSDP_CHECK(type == DeviceType::CUDA, "only a CUDA allocator can be registered");
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().cuda_factory = factory;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    static CpuAllocator cpu;
    return cpu;
  }
  Allocator* (*factory)(int) = nullptr;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    factory = registry().cuda_factory;
  }
  FSDP_CHECK(factory != nullptr,
             "device {} requested but this fsdp_train was built without the CUDA backend "
             "(configure with -DFSDP_CUDA=ON)",
             d.str());
  return *factory(d.index);
}

}  // namespace fsdp
