// Memory categories (fsdp/core/memory_category.h) and the allocator's split of its bytes by
// them (fsdp/core/allocator.h): scopes tag allocations and nest, a live allocation moves
// between categories, a snapshot's categories add up to the bytes in use, and the peak
// snapshot leaves idle caches out of "in use".
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "fsdp/core/allocator.h"
#include "fsdp/core/memory_category.h"
#include "fsdp/core/tensor.h"

namespace fsdp {
namespace {

uint64_t category_bytes(const MemorySnapshot& s, const std::string& name) {
  for (const auto& e : s.categories)
    if (memory::category_name(e.category) == name) return e.bytes;
  return 0;
}

void expect_adds_up(const MemorySnapshot& s) {
  uint64_t sum = 0, idle = 0;
  for (const auto& e : s.categories) {
    sum += e.bytes;
    if (memory::is_idle_cache(e.category)) idle += e.bytes;
  }
  EXPECT_EQ(sum, s.bytes_in_use);
  EXPECT_EQ(idle, s.idle_bytes);
}

TEST(MemoryCategory, ScopesTagAllocationsAndNest) {
  Allocator& a = allocator_for(Device::cpu());
  const MemorySnapshot before = a.snapshot();
  expect_adds_up(before);
  Tensor x, y, z;
  {
    const memory::CategoryScope outer("test group/outer");
    x = Tensor::empty({1000}, DType::F32);
    {
      const memory::CategoryScope inner("test group/inner");
      y = Tensor::empty({500}, DType::F32);
    }
    z = Tensor::empty({10}, DType::F64);
  }
  const MemorySnapshot s = a.snapshot();
  expect_adds_up(s);
  EXPECT_EQ(category_bytes(s, "test group/outer") - category_bytes(before, "test group/outer"), 4000u + 80u);
  EXPECT_EQ(category_bytes(s, "test group/inner") - category_bytes(before, "test group/inner"), 2000u);
  EXPECT_EQ(memory::group_of(memory::category("test group/inner")), memory::category("test group"));
  EXPECT_EQ(memory::current_category(), memory::kOther);
  y.storage()->set_category(memory::category("test group/outer"));
  EXPECT_EQ(category_bytes(a.snapshot(), "test group/inner"), category_bytes(before, "test group/inner"));
  x = Tensor();
  y = Tensor();
  z = Tensor();
  EXPECT_EQ(category_bytes(a.snapshot(), "test group/outer"), category_bytes(before, "test group/outer"));
}

TEST(MemoryCategory, PeakSnapshotLeavesIdleCachesOutOfInUse) {
  Allocator& a = allocator_for(Device::cpu());
  const memory::Category idle = memory::category("test pool (idle)", /*idle_cache=*/true);
  const memory::Category busy = memory::category("test pool busy");
  Tensor pooled;
  {
    const memory::CategoryScope tag(idle);
    pooled = Tensor::empty({1 << 16}, DType::F32);  // 256 KiB held idle
  }
  a.reset_peak();
  const uint64_t held = a.stats().current_bytes;
  Tensor small = Tensor::empty({100}, DType::F32);  // in use: a new peak of memory in use
  EXPECT_EQ(a.peak_snapshot().bytes_in_use, held + 400);
  pooled.storage()->set_category(busy);             // the pool buffer goes to work: a higher one
  const MemorySnapshot peak = a.peak_snapshot();
  expect_adds_up(peak);
  EXPECT_EQ(category_bytes(peak, "test pool busy"), uint64_t(4) << 16);
  EXPECT_EQ(peak.bytes_in_use, held + 400) << "the same bytes held, the pool's now in use";
  pooled.storage()->set_category(idle);
  small = Tensor();
  EXPECT_EQ(category_bytes(a.peak_snapshot(), "test pool busy"), uint64_t(4) << 16) << "the peak stays";
  // peak_top_group against the groups summed here.
  std::map<memory::Category, uint64_t> groups;
  for (const auto& e : a.peak_snapshot().categories) groups[memory::group_of(e.category)] += e.bytes;
  uint64_t top = 0;
  for (const auto& [g, b] : groups) top = std::max(top, b);
  const auto [group, bytes] = a.peak_top_group();
  EXPECT_EQ(bytes, top);
  EXPECT_EQ(groups[group], top);
  a.reset_peak();
  EXPECT_EQ(category_bytes(a.peak_snapshot(), "test pool busy"), 0u);
}

}  // namespace
}  // namespace fsdp
