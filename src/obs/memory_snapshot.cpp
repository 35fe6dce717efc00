// The memory snapshot file (fsdp/obs/memory_snapshot.h).
#include "fsdp/obs/memory_snapshot.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "fsdp/core/text_file.h"

namespace fsdp::obs {
namespace {

nlohmann::ordered_json allocator_json(const Allocator& a) {
  const MemorySnapshot s = a.peak_snapshot();
  std::vector<MemorySnapshot::Entry> entries = s.categories;
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  std::map<std::string, uint64_t> groups;
  nlohmann::ordered_json categories = nlohmann::ordered_json::array();
  for (const MemorySnapshot::Entry& e : entries) {
    const std::string group = memory::category_name(memory::group_of(e.category));
    groups[group] += e.bytes;
    categories.push_back({{"name", memory::category_name(e.category)},
                          {"group", group},
                          {"bytes", e.bytes},
                          {"allocations", e.allocations},
                          {"idle_cache", memory::is_idle_cache(e.category)}});
  }
  std::vector<std::pair<std::string, uint64_t>> by_size(groups.begin(), groups.end());
  std::stable_sort(by_size.begin(), by_size.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  nlohmann::ordered_json group_list = nlohmann::ordered_json::array();
  for (const auto& [name, bytes] : by_size) group_list.push_back({{"name", name}, {"bytes", bytes}});
  nlohmann::ordered_json j;
  j["name"] = a.name();
  j["bytes_in_use"] = s.bytes_in_use;
  j["idle_cache_bytes"] = s.idle_bytes;
  j["peak_bytes"] = a.stats().peak_bytes;
  j["groups"] = group_list;
  j["categories"] = categories;
  return j;
}

}  // namespace

std::string memory_snapshot_json(int64_t step, int rank, const std::vector<const Allocator*>& allocators) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["rank"] = rank;
  j["moment"] = "the first moment of the step's highest bytes in use outside idle caches";
  j["allocators"] = nlohmann::ordered_json::array();
  for (const Allocator* a : allocators) j["allocators"].push_back(allocator_json(*a));
  return j.dump(2) + "\n";
}

void write_memory_snapshot(const std::string& path, int64_t step, int rank,
                           const std::vector<const Allocator*>& allocators) {
  write_text_file(path, memory_snapshot_json(step, rank, allocators));
}

}  // namespace fsdp::obs
