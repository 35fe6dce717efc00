// Counts a test binary's C++ heap allocations, so a test can assert that a window of code
// (a training step, a steady-state collective) made none. Any file may include it to read
// heap_allocations(); exactly one source file per binary defines
// FSDP_DEFINE_ALLOCATION_COUNTER before including it, which installs the replacement
// operator new / delete that do the counting.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace fsdp::test {
inline std::atomic<uint64_t> g_heap_allocations{0};
inline uint64_t heap_allocations() { return g_heap_allocations.load(std::memory_order_relaxed); }
}  // namespace fsdp::test

#ifdef FSDP_DEFINE_ALLOCATION_COUNTER
void* operator new(std::size_t n) {
  fsdp::test::g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif  // FSDP_DEFINE_ALLOCATION_COUNTER
