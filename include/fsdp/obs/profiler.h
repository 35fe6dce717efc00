// The trace schedule of a run, as torch.profiler.schedule(wait, warmup, active) sets it,
// over global training steps (so a window means the same steps in a resumed run):
//
//   steps 1 .. wait                          nothing recorded
//   wait+1 .. wait+warmup                    recorded and dropped (the tracer warms up:
//                                            event pools grow, first-call costs are paid)
//   wait+warmup+1 .. wait+warmup+active      written to <profile_dir>/rank_<r>.trace.json
//
// Each rank records its own trace (fsdp/core/trace.h): its threads, its device's streams,
// its collectives and memory counters. Recording starts on every rank right after a
// barrier on the world group, so the ranks' files share one time axis and
// `fsdp_train trace-merge DIR` can put them in one file. A run that ends or is preempted
// inside the window writes the steps it recorded; a run resumed inside the window records
// from its first step. A window past train.max_steps gets a warning naming the keys.
#pragma once

#include <cstdint>
#include <string>

#include "fsdp/config/config.h"
#include "fsdp/core/device.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::obs {

// The schedule's steps (1-based, inclusive); active_end < active_start when there is no trace.
struct ProfileWindow {
  int64_t warmup_start = 0, active_start = 0, active_end = -1;
  bool any() const { return active_end >= active_start; }
};
ProfileWindow profile_window(const config::LoggingConfig& logging);

// The warnings a schedule deserves against train.max_steps ("" when none): a window that
// starts or ends past the last step, naming logging.profile_* and train.max_steps.
std::string profile_window_warning(const config::Config& cfg);

class Profiler {
 public:
  // `first_step`: the first step this run will train (a resumed run's checkpoint step + 1).
  // Probes the profile directory (a failure is reported by optional_output.h's rules).
  Profiler(const config::Config& cfg, dist::ProcessGroups& groups, Device device, int64_t first_step);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Before step `step` trains: at the window's start a barrier over the world group
  // (collective: every rank calls this for every step) and the recording starts; at the
  // active start the warmup's events are dropped.
  void before_step(int64_t step);
  // After step `step` (its eval and metrics included): the trace is written after the last
  // active step.
  void after_step(int64_t step);
  // The run ends (done or preempted) after `step`: a window cut short is written.
  void finish(int64_t step);

  // Where this rank's trace goes.
  std::string trace_path() const;

 private:
  void write(int64_t last_step);

  config::Config cfg_;
  dist::ProcessGroups& groups_;
  Device device_;
  ProfileWindow window_;
  bool writable_ = false;   // the profile directory passed its probe
  bool recording_ = false;
  int64_t first_recorded_ = 0;  // the first active step recorded
};

}  // namespace fsdp::obs
