// How the FSDP engine spreads a unit over ranks (what each strategy does: fsdp_engine.h).
// The engine owns the choice; the config only maps the YAML spelling to it
// (fsdp.sharding_strategy), so nothing below train needs the config to name one.
#pragma once

namespace fsdp {

enum class ShardingStrategy { FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD };

}  // namespace fsdp
