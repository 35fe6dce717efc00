// What a run writes besides the log and metrics.jsonl, each optional, in one place for the
// trainer's loop: the trace window (profiler.h), the memory snapshot (memory_snapshot.h)
// and TensorBoard scalars (tensorboard.h). A file that cannot be written is reported by
// optional_output.h's rules (one line; training goes on, or stops under logging.strict).
//
//   Observability obs(cfg, groups, device, first_step);
//   for each step s:  obs.before_step(s); train; obs.after_train_step(s);
//                     eval, metrics.jsonl; obs.log_step(metrics); checkpoint; obs.end_step(s)
//   obs.finish(last step)
#pragma once

#include <cstdint>
#include <memory>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/obs/profiler.h"
#include "fsdp/obs/tensorboard.h"

namespace fsdp::obs {

class Observability {
 public:
  // `first_step`: the first step this run trains (a resumed run's checkpoint step + 1).
  Observability(const config::Config& cfg, dist::ProcessGroups& groups, Device device, int64_t first_step);

  void before_step(int64_t step);        // collective (the trace window's barrier)
  void after_train_step(int64_t step);   // the memory snapshot, at the step's peak
  void log_step(const StepMetrics& m);   // TensorBoard
  void end_step(int64_t step);           // the trace's end (after the step's checkpoint)
  void finish(int64_t step);             // the run ends (done or preempted)

  // The memory snapshot's file for this rank.
  std::string memory_snapshot_path() const;

 private:
  config::Config cfg_;
  dist::ProcessGroups& groups_;
  Device device_;
  Profiler profiler_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0 with logging.tensorboard
};

}  // namespace fsdp::obs
