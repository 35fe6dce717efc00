// Which run a checkpoint belongs to, and moving another run's checkpoints out of the way.
// Every manifest records the run id of the run that wrote it (manifest.h); a run keeps the
// id of the checkpoint it resumed from and makes a new one when it starts fresh. The
// policy (when another run's checkpoints block a start, and when they are moved aside) is
// the trainer's: train/run_ownership.h. These are the rank-local steps it takes on rank 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::ckpt {

// A new run id, "<UTC time yyyymmddThhmmssZ>-<8 random hex digits>": sorts by start time,
// and two runs started in the same second still differ.
std::string new_run_id();

// A checkpoint directory step_<N> in a checkpoint.dir and the run that wrote it.
struct CheckpointOwner {
  std::string path;    // <dir>/step_<N>
  int64_t step = 0;
  std::string run_id;  // "" when its manifest has none (written before run ids) or cannot be read
  bool readable = true;  // its manifest parsed (false: a broken or half-deleted checkpoint)
};

// Every step_<N> directory in `dir` (list_checkpoints), newest first, with its run id.
std::vector<CheckpointOwner> checkpoint_owners(const std::string& dir);

// Moves the checkpoints `owners` (in `dir`) into a new folder <dir>/replaced-<UTC time>/,
// where resume and rotation never look, and returns that folder. Throws fsdp::Error naming
// the checkpoint that could not be moved (the ones before it are moved already).
std::string move_checkpoints_aside(const std::string& dir, const std::vector<CheckpointOwner>& owners);

// "20250102T030405Z": the time stamp of new_run_id and of the replaced-<time> folders.
std::string utc_stamp();

}  // namespace fsdp::ckpt
