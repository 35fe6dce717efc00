// The frozen units' shards and gathers; see frozen_shards.h.
#include "fsdp/fsdp/frozen_shards.h"

#include <algorithm>

#include "fsdp/core/error.h"
#include "fsdp/fsdp/engine_categories.h"

namespace fsdp {

FrozenShards::FrozenShards(const std::vector<model::UnitLayout>& units, std::vector<dist::Communicator*> groups,
                           BufferPool& pool, Device device)
    : pool_(pool) {
  FSDP_CHECK(groups.size() == units.size(), "frozen shards: {} groups for {} units", groups.size(), units.size());
  const memory::CategoryScope tag(engine_category::frozen_base());
  units_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    Unit& x = units_[u];
    x.group = groups[u];
    x.bytes = units[u].frozen_bytes;
    if (x.bytes == 0) continue;
    const int n = x.group->size();
    x.range = shard_range(x.bytes, n, x.group->rank());
    x.padded = x.range.size * n;
    x.shard = Tensor::zeros({x.range.size}, DType::U8, device);
  }
}

FrozenShards::~FrozenShards() {
  // Gathers still in flight write into pooled buffers: drain them (only reachable when a
  // step threw half-way).
  for (Unit& x : units_) {
    try {
      if (x.pending) x.group->wait(x.request);
    } catch (...) {
    }
  }
}

int64_t FrozenShards::max_padded_bytes(const std::vector<model::UnitLayout>& units,
                                       const std::vector<dist::Communicator*>& groups) {
  int64_t m = 0;
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].frozen_bytes > 0) m = std::max(m, padded_numel(units[u].frozen_bytes, groups[u]->size()));
  return m;
}

void FrozenShards::issue_gather(int unit) {
  if (unit < 0 || unit >= int(units_.size())) return;
  Unit& x = units_[size_t(unit)];
  if (x.bytes == 0 || x.direct() || x.full != nullptr) return;
  x.full = pool_.acquire(DType::U8, engine_category::gathered_parameters());
  x.request = x.group->all_gather(x.shard, x.full->t.narrow(0, 0, x.padded));
  x.pending = true;
}

void FrozenShards::wait_gather(int unit) {
  Unit& x = units_[size_t(unit)];
  if (x.bytes == 0 || x.direct()) return;
  if (x.full == nullptr) issue_gather(unit);
  if (!x.pending) return;
  x.group->wait(x.request);
  x.pending = false;
}

void FrozenShards::release(int unit) {
  Unit& x = units_[size_t(unit)];
  if (x.bytes == 0 || x.direct()) return;
  if (x.pending) wait_gather(unit);  // a prefetch nobody used: its buffer is still being written
  pool_.release(x.full);
}

Tensor FrozenShards::full(int unit) const {
  const Unit& x = units_[size_t(unit)];
  if (x.bytes == 0) return Tensor();
  if (x.direct()) return x.shard.narrow(0, 0, x.bytes);
  FSDP_CHECK(x.full != nullptr && !x.pending, "frozen unit {} used before it was gathered", unit);
  return x.full->t.narrow(0, 0, x.bytes);
}

uint64_t FrozenShards::persistent_bytes() const {
  uint64_t b = 0;
  for (const Unit& x : units_) b += x.shard.defined() ? x.shard.nbytes() : 0;
  return b;
}

void FrozenShards::finish() {
  for (int u = 0; u < int(units_.size()); ++u) release(u);
}

}  // namespace fsdp
