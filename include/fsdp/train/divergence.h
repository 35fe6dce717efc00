// A run that diverged: a loss or gradient norm that is not finite (outside float16's skipped
// steps), or weights that are not finite when a checkpoint is due. The run stops with the
// step and the last good checkpoint, and no checkpoint that holds the diverged weights stays
// where checkpoint.resume: auto would pick it, so a rerun or requeue cannot resume into the
// same failure over and over.
//
// Which weights are bad: a non-finite loss or gradient at step S was computed from the weights
// after step S-1, so a checkpoint of step S-1 (saved by this run, or the one it resumed from)
// reproduces it exactly; it is moved aside to step_<S-1>.diverged (kept for inspection,
// invisible to resume). Non-finite weights at a save of step S are never written. Checkpoints
// that are themselves non-finite are also refused by the resume-time verification
// (ckpt/checkpoint_reader.h), whichever run wrote them.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/core/error.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"

namespace fsdp::train {

class Diverged : public Error {
 public:
  // `what`: "loss is nan at step 12"; bad_from: the first step whose weights are bad.
  Diverged(const std::string& what, int64_t step, int64_t bad_from)
      : Error(what), step_(step), bad_from_(bad_from) {}
  int64_t step() const { return step_; }
  int64_t bad_from() const { return bad_from_; }

 private:
  int64_t step_, bad_from_;
};

// Collective over `world`: whether every rank's master shards are finite (one sum of squares
// per unit, accumulated in double, and one all-reduce: cheap next to the save it guards).
bool weights_finite(const FsdpEngine& engine, dist::Communicator& world);

// Rank 0 moves the checkpoints of steps >= d.bad_from() in `dir` aside. Returns the line to
// report: d's message, what was set aside, and the newest checkpoint left (the last good one)
// or that a rerun starts from step 0.
std::string handle_divergence(const Diverged& d, const std::string& dir, bool rank0);

}  // namespace fsdp::train
