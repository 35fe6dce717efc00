// The trace schedule (fsdp/obs/profiler.h): when each rank's recording starts, drops its
// warmup and is written.
#include "fsdp/obs/profiler.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fsdp/core/trace.h"
#include "fsdp/obs/optional_output.h"

namespace fsdp::obs {

ProfileWindow profile_window(const config::LoggingConfig& l) {
  ProfileWindow w;
  w.warmup_start = int64_t(l.profile_wait) + 1;
  w.active_start = int64_t(l.profile_wait) + l.profile_warmup + 1;
  w.active_end = int64_t(l.profile_wait) + l.profile_warmup + l.profile_active;
  return w;
}

std::string profile_window_warning(const config::Config& cfg) {
  const ProfileWindow w = profile_window(cfg.logging);
  const auto& l = cfg.logging;
  const int64_t last = cfg.train.max_steps;
  if (!w.any()) return "";
  if (w.active_start > last) {
    return fmt::format("logging.profile_wait {} + logging.profile_warmup {} put the first traced step at {}, past "
                       "train.max_steps {}: no trace will be written",
                       l.profile_wait, l.profile_warmup, w.active_start, last);
  }
  if (w.active_end > last) {
    return fmt::format("logging.profile_wait {} + logging.profile_warmup {} + logging.profile_active {} end the "
                       "trace at step {}, past train.max_steps {}: the trace will hold steps {}-{} only",
                       l.profile_wait, l.profile_warmup, l.profile_active, w.active_end, last, w.active_start, last);
  }
  return "";
}

Profiler::Profiler(const config::Config& cfg, dist::ProcessGroups& groups, Device device, int64_t first_step)
    : cfg_(cfg), groups_(groups), device_(device), window_(profile_window(cfg.logging)) {
  if (!window_.any()) return;
  const bool rank0 = groups_.world->rank() == 0;
  if (const std::string w = profile_window_warning(cfg); !w.empty() && rank0) spdlog::warn("trace: {}", w);
  const int64_t last = std::min<int64_t>(window_.active_end, cfg.train.max_steps);
  if (first_step > last) {
    // Asked for and not produced (typically a resumed run in a finished run's run.dir):
    // said at warning level, so a run that exits 0 does not look like it wrote a trace.
    if (rank0 && window_.active_start <= cfg.train.max_steps) {
      spdlog::warn("trace: logging.profile_active traces steps {}-{}, but this run starts at step {} (it resumed from "
                   "a checkpoint in {}): no trace is written; give the run its own run.dir",
                   window_.active_start, window_.active_end, first_step, config::checkpoint_dir(cfg));
    }
    window_ = ProfileWindow{};  // nothing to do, and no barrier either
    return;
  }
  if (window_.active_start > cfg.train.max_steps) return;
  if (const std::string err = probe_output_dir(config::profile_dir(cfg)); !err.empty()) {
    output_failed(cfg, fmt::format("logging.profile_dir: {}: rank {} writes no trace", err, groups_.world->rank()));
    return;
  }
  writable_ = true;
}

Profiler::~Profiler() {
  if (recording_) trace::stop();  // unwinding from a failed step
}

std::string Profiler::trace_path() const {
  return (std::filesystem::path(config::profile_dir(cfg_)) / fmt::format("rank_{}.trace.json", groups_.world->rank()))
      .string();
}

void Profiler::before_step(int64_t step) {
  if (!window_.any() || step > window_.active_end || step < window_.warmup_start) return;
  if (first_recorded_ == 0) {
    // Every rank reaches this at the same step (the window is global): the barrier lines
    // their clocks up (fsdp/core/trace.h), whether or not this rank can write its file.
    groups_.world->barrier();
    first_recorded_ = std::max(step, window_.active_start);
    if (writable_) {
      std::vector<int> devices;
      if (device_.is_cuda()) devices.push_back(device_.index);
      trace::start(devices);
      recording_ = true;
    }
    return;
  }
  if (recording_ && step == window_.active_start) trace::clear();  // the warmup's events go
}

void Profiler::after_step(int64_t step) {
  if (recording_ && step == window_.active_end) write(step);
}

void Profiler::finish(int64_t step) {
  if (!recording_) return;
  if (step < window_.active_start) {  // ended inside the warmup: nothing active to write
    trace::stop();
    recording_ = false;
    return;
  }
  write(step);
}

void Profiler::write(int64_t last_step) {
  trace::stop();
  recording_ = false;
  const dist::WorldInfo& w = groups_.world_info;
  nlohmann::ordered_json other;
  other["fsdp_train"] = FSDP_VERSION;
  other["rank"] = w.rank;
  other["world_size"] = w.size;
  other["host"] = w.hostname;
  other["device"] = device_.str();
  other["steps"] = {first_recorded_, last_step};
  other["clock"] = "microseconds since a barrier of every rank at the start of the recording";
  const std::string path = trace_path();
  try {
    trace::write(path, w.rank, fmt::format("rank {} ({})", w.rank, w.hostname), other.dump());
  } catch (const Error& e) {
    output_failed(cfg_, fmt::format("logging.profile_dir: {}", e.what()));
    return;
  }
  if (w.rank == 0) {
    spdlog::info("trace: steps {}-{} written to {} (one file per rank; open one in ui.perfetto.dev, or merge them "
                 "with `fsdp_train trace-merge {}`)",
                 first_recorded_, last_step, path, config::profile_dir(cfg_));
  }
}

}  // namespace fsdp::obs
