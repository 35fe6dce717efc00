// Note [Run lock]
// Two `train` processes on one run.dir destroyed each other's work: the second resumed from
// the first's newest checkpoint, both saved step_N under the same names and run id, keep_last
// rotation deleted the other's, and metrics.jsonl ended at a step no checkpoint held (or the
// second died on a step_N.tmp collision). A requeued Slurm job whose previous run is still
// being killed is exactly that. Run ownership (run_ownership.h) cannot tell: both are the
// same run.
//
// So a training run locks run.dir, and checkpoint.dir when it is another directory, before
// it looks for a checkpoint to resume and until it exits (core/dir_lock.h: flock on
// <dir>/fsdp_train.lock, which records host, pid, start time and the Slurm job). A second
// run is refused, naming the holder:
//   run.dir runs/x is in use by pid 1234 on host n01 (since 2026-01-02T03:04:05Z)
// except that the next run of the same Slurm job (a higher SLURM_RESTART_COUNT) waits up to
// kPredecessorWait for the previous one to exit. A lock whose holder died is taken over with
// a warning. Rank 0 holds the locks; the other ranks learn its verdict. Where flock does not
// reach across nodes (docs/checkpoints-and-resume.md, "One run per directory"), the lock
// file's heartbeat shows a live holder on another node and the run is refused all the same.
// A run refused before its first step removes the directories it created, lock files and all
// (release_run_lock); one waiting on such a lock file starts over on the path's new one.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/core/dir_lock.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

inline constexpr std::chrono::seconds kPredecessorWait{180};

// The locks of one run (none on ranks other than 0); released when destroyed.
struct RunLock {
  std::vector<std::unique_ptr<DirLock>> locks;
};

// Collective over `world`: rank 0 creates run.dir and checkpoint.dir if needed and locks
// them; throws fsdp::Error on every rank with rank 0's words when it cannot (having released
// the locks it took as release_run_lock does, with `created`).
RunLock lock_run_dirs(const config::Config& cfg, dist::Communicator& world,
                      const std::vector<std::string>& created = {});

// A run refused at start-up leaves no directory it created behind (remove_created_dirs in
// output_dirs.h), and a directory holding only this run's lock file is not empty: releases
// the locks, removing the lock file of each directory in `created` first. Never throws.
void release_run_lock(RunLock& lock, const std::vector<std::string>& created);

// The lock options a run uses, from its environment (SLURM_JOB_ID, SLURM_RESTART_COUNT):
// the tag it records, and which holder it waits for (the same job's previous run).
DirLockOptions run_lock_options(const std::map<std::string, std::string>& env);

}  // namespace fsdp::train
