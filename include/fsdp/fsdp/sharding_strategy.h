// How the FSDP engine spreads a unit over ranks (what each strategy does: fsdp_engine.h).
// The engine owns the choice; the config only maps the YAML spelling to it
// (fsdp.sharding_strategy), so nothing below train needs the config to name one.
//
// The names and their behaviour are PyTorch FSDP's (torch.distributed.fsdp.ShardingStrategy),
// so a config carried over from PyTorch means the same memory here:
//   FULL_SHARD          shard over every data-parallel rank, free after forward
//   SHARD_GRAD_OP       shard over every data-parallel rank, keep gathered until backward
//   NO_SHARD            every rank holds everything (DDP)
//   HYBRID_SHARD        FULL_SHARD within a shard group, replicate across groups
//   HYBRID_SHARD_ZERO2  SHARD_GRAD_OP within a shard group, replicate across groups
//                       (PyTorch's _HYBRID_SHARD_ZERO2)
#pragma once

namespace fsdp {

enum class ShardingStrategy { FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 };

// Whether a unit's gathered parameters are freed after its forward (and gathered again for
// its backward), trading a second all-gather for not holding every unit at once. The one
// rule the engine, its memory replay and the plan all follow (Note [FSDP unit lifecycle]).
constexpr bool reshards_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::FULL_SHARD || s == ShardingStrategy::HYBRID_SHARD;
}

// Whether units are sharded over fsdp.shard_group_size ranks and replicated across the
// groups (the mesh's replicate dimension), rather than over every data-parallel rank.
constexpr bool is_hybrid(ShardingStrategy s) {
  return s == ShardingStrategy::HYBRID_SHARD || s == ShardingStrategy::HYBRID_SHARD_ZERO2;
}

}  // namespace fsdp
