#include "fsdp/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "fsdp/core/error.h"

namespace fsdp {

MemoryStats Allocator::stats() const {
  return MemoryStats{current_.load(), peak_.load(), allocs_.load()};
}

void Allocator::reset_peak() { peak_.store(current_.load()); }

void Allocator::record_alloc(size_t n) {
  const size_t now = current_.fetch_add(n) + n;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocs_.fetch_add(1);
}

void Allocator::record_free(size_t n) { current_.fetch_sub(n); }

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
