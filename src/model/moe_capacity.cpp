// Dropping the pairs over an expert's capacity; see Note [Expert capacity] in moe_capacity.h.
#include "fsdp/model/moe_capacity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "fsdp/core/error.h"

namespace fsdp::model {

int64_t expert_capacity(const LlamaConfig& cfg, int64_t tokens) {
  if (!(cfg.capacity_factor > 0) || !cfg.is_moe()) return 0;
  const double c = std::ceil(cfg.capacity_factor * double(tokens) * double(cfg.experts_per_token) /
                             double(cfg.num_experts));
  return std::max<int64_t>(1, int64_t(c));
}

int64_t drop_over_capacity(const Tensor& probs, const Tensor& expert, int64_t capacity, const Tensor& order,
                           const Tensor& slot, const Tensor& offsets) {
  for (const Tensor* t : {&probs, &expert, &order, &slot, &offsets})
    FSDP_CHECK(t->device().is_cpu() && t->is_contiguous(), "moe capacity: {} must be a contiguous host tensor",
               t->str());
  const int64_t N = expert.size(0), k = expert.size(1), E = offsets.numel() - 1, NK = N * k;
  FSDP_CHECK(capacity >= 1 && order.numel() == NK && slot.numel() == NK && probs.size(0) == N && probs.size(1) == E,
             "moe capacity: shapes {} {} {} {} {} with capacity {}", probs.str(), expert.str(), order.str(),
             slot.str(), offsets.str(), capacity);
  int32_t* ord = order.data<int32_t>();
  int32_t* sl = slot.data<int32_t>();
  int32_t* off = offsets.data<int32_t>();
  const int32_t* ex = expert.data<int32_t>();
  auto prob = [&](int32_t f) { return probs.get_flat(int64_t(f / k) * E + ex[f]); };
  std::vector<int32_t> kept, dropped, group;
  std::vector<char> keep(size_t(NK), 0);
  std::vector<int32_t> bounds(size_t(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) {
    group.assign(ord + off[e], ord + off[e + 1]);  // in flat pair order (the sort is stable)
    if (int64_t(group.size()) > capacity) {
      // The `capacity` most probable, ties to the lower flat index; then back to flat order.
      std::stable_sort(group.begin(), group.end(), [&](int32_t a, int32_t b) { return prob(a) > prob(b); });
      group.resize(size_t(capacity));
      std::sort(group.begin(), group.end());
    }
    for (int32_t f : group) keep[size_t(f)] = 1;
    kept.insert(kept.end(), group.begin(), group.end());
    bounds[size_t(e) + 1] = int32_t(kept.size());
  }
  for (int32_t f = 0; f < NK; ++f)
    if (!keep[size_t(f)]) dropped.push_back(f);
  kept.insert(kept.end(), dropped.begin(), dropped.end());
  for (int64_t s = 0; s < NK; ++s) {
    ord[s] = kept[size_t(s)];
    sl[kept[size_t(s)]] = int32_t(s);
  }
  std::copy(bounds.begin(), bounds.end(), off);
  return int64_t(dropped.size());
}

}  // namespace fsdp::model
