// The frozen half of the FSDP units (param_units.h): each unit's frozen bytes (LoRA's base,
// dense or NF4), sharded over the unit's group like the trainable flat buffer (the shard
// group, or an expert unit's expert-data-parallel ranks: fsdp_engine.cpp's shard_group_of) and
// all-gathered before the unit runs, but never reduced, never updated, and holding no
// gradient or optimizer state. Every byte is moved as it is (no dtype casts: the values are
// already in the compute dtype, or NF4 codes and float32 statistics). With a one-rank shard
// group the shard is the whole unit and nothing is gathered. The engine (fsdp_engine.h)
// calls these beside its trainable units' gathers and releases, so a frozen unit follows
// the same lifecycle (Note [FSDP unit lifecycle]).
#pragma once

#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/buffer_pool.h"
#include "fsdp/fsdp/shard_math.h"
#include "fsdp/model/param_units.h"

namespace fsdp {

class FrozenShards {
 public:
  // groups[u]: the group unit u is sharded over.
  FrozenShards(const std::vector<model::UnitLayout>& units, std::vector<dist::Communicator*> groups,
               BufferPool& pool, Device device);
  ~FrozenShards();

  // Largest padded frozen unit in bytes (the pool's byte capacity), each over groups[u].
  static int64_t max_padded_bytes(const std::vector<model::UnitLayout>& units,
                                  const std::vector<dist::Communicator*>& groups);

  // Fills every unit's shard from fill(u, begin, host): `host` is a uint8 CPU tensor to
  // receive bytes [begin, begin + host.numel()) of unit u's frozen buffer (zero past its
  // end); on a GPU it is then uploaded.
  template <typename Fill>
  void init(Fill&& fill) {
    for (int u = 0; u < int(units_.size()); ++u) {
      Unit& x = units_[size_t(u)];
      if (x.bytes == 0) continue;
      if (x.shard.device().is_cpu()) {
        fill(u, x.range.begin, x.shard);
      } else {
        const Tensor host = Tensor::zeros(x.shard.sizes(), DType::U8);
        fill(u, x.range.begin, host);
        x.shard.copy_(host);
      }
    }
  }

  bool has(int unit) const { return units_[size_t(unit)].bytes > 0; }
  void issue_gather(int unit);  // no-op when gathered, in flight, or nothing frozen
  void wait_gather(int unit);   // issues it first if needed
  void release(int unit);       // the gathered buffer back to the pool
  // The unit's gathered bytes ([frozen_bytes] uint8), or undefined when it has none.
  Tensor full(int unit) const;
  const Tensor& shard(int unit) const { return units_[size_t(unit)].shard; }
  const ShardRange& range(int unit) const { return units_[size_t(unit)].range; }
  uint64_t persistent_bytes() const;  // this rank's shards
  // Waits for every gather in flight and releases every buffer (end of a pass).
  void finish();

 private:
  struct Unit {
    int64_t bytes = 0, padded = 0;
    ShardRange range;
    Tensor shard;  // [range.size] uint8
    BufferPool::Buffer* full = nullptr;
    dist::Request request;
    bool pending = false;
    dist::Communicator* group = nullptr;
    bool direct() const { return group->size() == 1; }
  };

  std::vector<Unit> units_;
  BufferPool& pool_;
};

}  // namespace fsdp
