#include "fsdp/train/launch_checks.h"

#include <cstring>
#include <string>

#include "fsdp/core/error.h"

namespace fsdp::train {

int shard_group_size(const config::Config& cfg) {
  switch (cfg.fsdp.sharding_strategy) {
    case config::ShardingStrategy::FULL_SHARD:
    case config::ShardingStrategy::SHARD_GRAD_OP: return 0;
    case config::ShardingStrategy::NO_SHARD: return 1;
    case config::ShardingStrategy::HYBRID_SHARD: return cfg.fsdp.shard_group_size > 0 ? cfg.fsdp.shard_group_size : -1;
  }
  return 0;
}

void check_launch(const config::Config& cfg, dist::ProcessGroups& groups) {
  dist::Communicator& world = *groups.world;
  const int n = world.size();
  if (n == 1) return;
  // The 64-bit hash travels as the bit pattern of a double: all-gather copies bytes and
  // does no arithmetic, so every bit arrives intact.
  const uint64_t mine = config::config_hash(cfg);
  Tensor shard = Tensor::empty({1}, DType::F64);
  Tensor all = Tensor::empty({n}, DType::F64);
  std::memcpy(shard.data_ptr(), &mine, 8);
  world.wait(world.all_gather(shard, all));
  uint64_t root = 0;
  std::memcpy(&root, all.data<double>(), 8);
  std::string differ;
  for (int r = 1; r < n; ++r) {
    uint64_t h = 0;
    std::memcpy(&h, all.data<double>() + r, 8);
    if (h != root) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  FSDP_CHECK(differ.empty(),
             "ranks disagree on the effective config: rank(s) {} differ from rank 0 (same --config file and --set "
             "overrides on every rank? this is rank {} on {})",
             differ, world.rank(), groups.world_info.hostname);
}

}  // namespace fsdp::train
