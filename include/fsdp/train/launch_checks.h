// Start-up checks of the launch itself, run on every rank before any work: the process
// groups a strategy needs, and that every rank was given the same effective config.
#pragma once

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

// The shard-group size to ask init_process_groups for: the whole world for FULL_SHARD and
// SHARD_GRAD_OP, one rank for NO_SHARD, fsdp.shard_group_size (default: one node) for
// HYBRID_SHARD.
int shard_group_size(const config::Config& cfg);

// Throws fsdp::Error naming the ranks whose effective config differs from rank 0's (by
// config_hash, one all-gather over the world).
void check_launch(const config::Config& cfg, dist::ProcessGroups& groups);

}  // namespace fsdp::train
