// The start-up check of a training run's outputs: run.dir (metrics.jsonl) and
// checkpoint.dir are created and proven writable (core/writable_dir.h) before the model is
// built and long before the first save, which with the default checkpoint.interval comes
// only after the whole run. Other outputs call ensure_writable_dir for their own key.
#pragma once

#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

// Collective over `world`: every rank probes checkpoint.dir (each writes its own shard
// there, and on several nodes each node sees its own mount), rank 0 also run.dir. Throws
// on every rank when any rank failed: its own message, or naming the ranks that did.
// Returns the directories this call created (rank-local), for remove_created_dirs.
std::vector<std::string> check_output_dirs(const config::Config& cfg, dist::Communicator& world);

// A run that fails before its first step leaves no empty run.dir or checkpoints/ behind:
// removes each of `dirs` (deepest first) that is still empty. Never throws.
void remove_created_dirs(const std::vector<std::string>& dirs);

}  // namespace fsdp::train
