// Best-fit decreasing packing; see packing.h.
#include "fsdp/data/packing.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "fsdp/core/error.h"

namespace fsdp::data {

double PackedWindows::padding_share() const {
  const double total = double(num_windows()) * double(capacity);
  return total > 0 ? 1.0 - double(placed_tokens) / total : 0.0;
}

PackedWindows best_fit_pack(std::span<const int64_t> lengths, int64_t capacity) {
  FSDP_CHECK(capacity >= 1, "best_fit_pack: capacity {} must be >= 1", capacity);
  PackedWindows p;
  p.capacity = capacity;
  const int64_t n = int64_t(lengths.size());
  std::vector<int64_t> by_length(static_cast<size_t>(n));
  std::iota(by_length.begin(), by_length.end(), int64_t(0));
  std::stable_sort(by_length.begin(), by_length.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> windows;
  std::set<std::pair<int64_t, int64_t>> open;  // (free tokens, window), smallest free space first
  for (const int64_t i : by_length) {
    FSDP_CHECK(lengths[i] > 0, "best_fit_pack: example {} has {} tokens", i, lengths[i]);
    const int64_t len = std::min(lengths[i], capacity);
    p.cut_examples += lengths[i] > capacity ? 1 : 0;
    p.placed_tokens += len;
    auto it = open.lower_bound({len, int64_t(-1)});
    int64_t w = 0, free = 0;
    if (it == open.end()) {
      w = int64_t(windows.size());
      windows.emplace_back();
      free = capacity;
    } else {
      std::tie(free, w) = *it;
      open.erase(it);
    }
    windows[size_t(w)].push_back(i);
    if (free - len > 0) open.insert({free - len, w});
  }
  p.first.push_back(0);
  for (std::vector<int64_t>& w : windows) {
    std::sort(w.begin(), w.end());
    p.examples.insert(p.examples.end(), w.begin(), w.end());
    p.first.push_back(int64_t(p.examples.size()));
  }
  return p;
}

}  // namespace fsdp::data
