// When and how a training run checkpoints, and where it resumes from: the trainer's one
// owner of the checkpoint writer (ckpt/checkpoint_writer.h), of checkpoint.interval,
// checkpoint.stop_on_error, the last saved step, and checkpoint.resume.
//
//   start()          collective: the checkpoint checkpoint.resume picks ("" = fresh start),
//                    and for a training run its claim on checkpoint.dir (run_ownership.h)
//   restore()        reads this rank's shards of it into the engine; returns the counters
//   save()           collective: a checkpoint of the current state (or starts an async one)
//   commit_ready()   collective: commits a background save once no rank is still writing
//                    (the trainer learns that from its per-step votes, step_votes.h)
//   finish()         collective: waits for a background save and commits it
//
// A failed save or commit stops the run (the error names the rank and the file), or with
// checkpoint.stop_on_error: false is logged and training goes on; committed_at() tells the
// trainer whether its final state reached the disk.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fsdp/ckpt/checkpoint_writer.h"
#include "fsdp/ckpt/manifest.h"
#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/decoder.h"

namespace fsdp::train {

class CheckpointPolicy {
 public:
  CheckpointPolicy(const config::Config& cfg, dist::ProcessGroups& groups);

  // Collective: checkpoint.resume's choice: "" for none (resume: none, or auto with no
  // complete checkpoint in checkpoint.dir nor a checkpoint.load_dir), else a verified path.
  // `claims_dir` (a run that will save): also settles the run id and checkpoint.dir's
  // ownership (Note [Run ownership]); throws when another run's checkpoints are in the way.
  std::string start(bool claims_dir);
  // This run's id ("" for an evaluation of a checkpoint without one, or of a fresh model).
  const std::string& run_id() const { return run_id_; }
  // Reads the checkpoint at `path` into the engine's shards (master weights and AdamW
  // moments, each rank its own range, on any world size) and returns the rest of the
  // state it holds. The model must be the checkpoint's shape.
  ckpt::TrainState restore(const std::string& path, const model::Llama& model, FsdpEngine& engine);

  // Collective: saves `state` with the engine's shards.
  ckpt::SaveStats save(const ckpt::TrainState& state, const model::Llama& model, FsdpEngine& engine);
  // Whether checkpoint.interval asks for a save after `step` (the final step saves anyway).
  bool due(int64_t step) const;
  // Whether the state at `step` is already saved (or was resumed from).
  bool saved_at(int64_t step) const { return last_saved_step_ == step; }
  // Whether a checkpoint of the state at `step` is on disk, committed (or was resumed from):
  // false after a save that failed under checkpoint.stop_on_error: false.
  bool committed_at(int64_t step) const { return last_committed_step_ == step; }
  // This rank's background write is still running (its vote in StepVotes::busy_writers).
  bool local_busy() const { return writer_->local_busy(); }
  // Collective: commits a pending background save when `busy_writers` (summed over ranks)
  // is 0; otherwise nothing.
  void commit_ready(int busy_writers);
  // Collective: waits for a pending background save and commits it.
  void finish();

  const std::string& resumed_from() const { return resumed_from_; }
  // A LoRA run's frozen base: recorded in every save, and a restore from a checkpoint of
  // another base is refused (base_model.h).
  void set_base(const ckpt::BaseReference& base) { base_ = base; }

 private:
  // Runs a writer call under checkpoint.stop_on_error: rethrows, or logs and returns false.
  template <typename F>
  bool guarded(F&& f);
  std::string resume_point();
  // Errors unless a LoRA checkpoint's recorded lora.alpha and lora.rslora are this run's.
  void check_same_lora_scale(const std::string& saved_yaml, const std::string& path) const;
  void log_save(const ckpt::SaveStats& s, bool committed);
  // Rank 0, a training run: warns of each change to the schedule or global batch against
  // the checkpoint's config (resume_changes.h).
  void warn_changes(const ckpt::Manifest& m, const std::string& path) const;

  config::Config cfg_;
  dist::ProcessGroups& groups_;
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  int64_t last_saved_step_ = -1;
  int64_t last_committed_step_ = -1;
  std::string resumed_from_;
  std::string run_id_;
  std::optional<ckpt::BaseReference> base_;
  bool training_ = false;  // start(claims_dir = true): a training run, not an evaluation
};

}  // namespace fsdp::train
