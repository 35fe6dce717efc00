// What a resumed run changes against the run that wrote its checkpoint, said before the
// first step: a resumed run continues the original loss curve only with the same learning-
// rate schedule and the same global batch, and neither is kept silently when the command
// line changes (raising train.max_steps re-stretches a cosine schedule; more ranks with the
// same micro-batch and accumulation multiply the tokens per step).
#pragma once

#include <string>
#include <vector>

#include "fsdp/config/config.h"

namespace fsdp::train {

// The warnings for resuming `saved` (the checkpoint's effective config, written by
// `saved_world` data-parallel ranks, at step `step`) as `now` on `world` data-parallel ranks
// (the world / parallel.tensor: a tensor group reads one micro-batch): one line per change of the
// LR schedule (train.max_steps, optim.lr, min_lr, warmup_steps, schedule; with the lr of the
// next step under both) and of the global batch (sequences per optimizer step), each with
// the old and new values. Empty when the run continues as it was.
std::vector<std::string> resume_changes(const config::Config& saved, int saved_world, const config::Config& now,
                                        int world, int64_t step);

}  // namespace fsdp::train
