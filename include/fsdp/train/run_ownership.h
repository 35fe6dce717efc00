// Note [Run ownership]
// A run owns its checkpoint.dir. Without that, `checkpoint.resume: none` into a directory
// holding an older run's step_100 saved step_2, 4, 6 and had each deleted at once by
// keep_last rotation (the old, higher steps win), exiting 0 with none of its work on disk;
// reaching a step the old run used replaced that checkpoint, leaving two runs mixed in one
// directory, and a later `resume: auto` continued the old run with the new one's metrics.
//
// So every checkpoint's manifest and every metrics.jsonl line carry a run id. A run that
// resumes keeps its checkpoint's id; a fresh start makes a new one. At start-up, before
// the first step, the checkpoints in checkpoint.dir that are not this run's (for a fresh
// start: all of them; for a resumed run: those with another run id) stop the run with one
// error naming them, unless checkpoint.overwrite is true: then they are moved into
// <checkpoint.dir>/replaced-<UTC time>/ (resume and rotation never look there), and a fresh
// run's predecessor's metrics.jsonl to metrics.jsonl.replaced-<UTC time>, and the log says
// where. Rotation (checkpoint_writer.h) never deletes the checkpoint just written.
#pragma once

#include <string>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

// Collective over `world`: this run's id, the same on every rank (`resumed_run_id` when the
// run resumed from a checkpoint that has one, else a new one), once checkpoint.dir holds
// no other run's checkpoints (Note above). `resumed_from` is the checkpoint resumed from,
// "" for a fresh start. Throws fsdp::Error on every rank when another run's checkpoints
// are in the way and checkpoint.overwrite is false, or when moving them aside failed.
std::string claim_checkpoint_dir(const config::Config& cfg, dist::Communicator& world, const std::string& resumed_from,
                                 const std::string& resumed_run_id);

}  // namespace fsdp::train
