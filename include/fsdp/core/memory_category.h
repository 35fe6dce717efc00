// What each allocation is for: a category tag that the code making an allocation sets for
// its scope (as SMP's memory tracker and torch.cuda.memory._record_memory_history attribute
// memory), so that a memory snapshot and the step line can say where the bytes went.
//
//   { memory::CategoryScope tag(memory::category("sharded state"));
//     master = Tensor::zeros(...); }                 // counted as "sharded state"
//
// A category is an interned name; the part before the first '/' is its group
// ("activations/layers.3" belongs to "activations"), which is what the step line names.
// Allocations made outside any scope count as "other". A category may be marked as an idle
// cache (buffers a pool holds for reuse, like PyTorch's reserved-but-unallocated memory):
// its bytes are still the allocator's, but a snapshot's "peak in use" leaves them out.
//
// Storage (fsdp/core/tensor.h) remembers the category its memory was allocated under and
// gives the bytes back to it when freed; Storage::set_category moves a live allocation to
// another category (the FSDP engine's pool buffers change use: gathered parameters,
// gradients, idle). The per-category totals live in each Allocator (fsdp/core/allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::memory {

using Category = uint16_t;
inline constexpr Category kOther = 0;  // "other": no scope set
// Distinct names beyond this fold into "other" (a model has a few per block: 80 blocks fit).
inline constexpr size_t kMaxCategories = 1024;

// The id of `name`, interning it on first use (thread-safe). idle_cache marks the category
// as a cache of idle buffers; the flag is fixed by the first call with that name.
Category category(std::string_view name, bool idle_cache = false);
std::string category_name(Category c);
// The category named by c's name up to its first '/' ("activations" for
// "activations/layers.3"; c itself for a name without one). Lock-free.
Category group_of(Category c);
bool is_idle_cache(Category c);
size_t num_categories();  // ids handed out so far: [0, num_categories())

// The category this thread's allocations are made under.
Category current_category();

// Sets this thread's category while in scope; scopes nest (the innermost wins).
class CategoryScope {
 public:
  explicit CategoryScope(Category c);
  explicit CategoryScope(std::string_view name) : CategoryScope(category(name)) {}
  ~CategoryScope();
  CategoryScope(const CategoryScope&) = delete;
  CategoryScope& operator=(const CategoryScope&) = delete;

 private:
  Category previous_;
};

}  // namespace fsdp::memory
