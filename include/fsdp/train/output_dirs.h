// The start-up check of a training run's outputs: run.dir (metrics.jsonl) and
// checkpoint.dir are created and proven writable (core/writable_dir.h) before the model is
// built and long before the first save, which with the default checkpoint.interval comes
// only after the whole run. Other outputs call ensure_writable_dir for their own key.
#pragma once

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

// Collective over `world`: every rank probes checkpoint.dir (each writes its own shard
// there, and on several nodes each node sees its own mount), rank 0 also run.dir. Throws
// on every rank when any rank failed: its own message, or naming the ranks that did.
void check_output_dirs(const config::Config& cfg, dist::Communicator& world);

}  // namespace fsdp::train
