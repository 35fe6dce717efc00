// The category registry (fsdp/core/memory_category.h): names interned once, ids handed out
// in order. Lookups by name take a lock (a scope is set a few times per unit per step);
// the idle-cache flag, which the allocator reads under its own lock, is an atomic array.
#include "fsdp/core/memory_category.h"

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fsdp::memory {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::string> names{"other"};
  std::unordered_map<std::string, Category> ids{{"other", kOther}};
  std::array<std::atomic<bool>, kMaxCategories> idle{};
  std::array<std::atomic<Category>, kMaxCategories> group{};  // group[id]: the id of the name before '/'
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local Category tl_current = kOther;

Category intern_locked(Registry& r, const std::string& key, bool idle_cache) {
  if (const auto it = r.ids.find(key); it != r.ids.end()) return it->second;
  const size_t slash = key.find('/');
  const Category group = slash == std::string::npos ? Category(r.names.size()) : intern_locked(r, key.substr(0, slash), false);
  if (r.names.size() >= kMaxCategories) return kOther;
  const auto id = Category(r.names.size());
  r.names.push_back(key);
  r.ids.emplace(key, id);
  r.idle[id].store(idle_cache, std::memory_order_relaxed);
  r.group[id].store(group, std::memory_order_relaxed);
  return id;
}

}  // namespace

Category category(std::string_view name, bool idle_cache) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return intern_locked(r, std::string(name), idle_cache);
}

std::string category_name(Category c) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return c < r.names.size() ? r.names[c] : std::string("other");
}

Category group_of(Category c) {
  return c < kMaxCategories ? registry().group[c].load(std::memory_order_relaxed) : kOther;
}

bool is_idle_cache(Category c) { return c < kMaxCategories && registry().idle[c].load(std::memory_order_relaxed); }

size_t num_categories() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.names.size();
}

Category current_category() { return tl_current; }

CategoryScope::CategoryScope(Category c) : previous_(tl_current) { tl_current = c; }

CategoryScope::~CategoryScope() { tl_current = previous_; }

}  // namespace fsdp::memory
