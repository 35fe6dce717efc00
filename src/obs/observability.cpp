// The run's optional outputs (fsdp/obs/observability.h).
#include "fsdp/obs/observability.h"

#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/core/trace.h"
#include "fsdp/obs/memory_snapshot.h"
#include "fsdp/obs/optional_output.h"

namespace fsdp::obs {

Observability::Observability(const config::Config& cfg, dist::ProcessGroups& groups, Device device,
                             int64_t first_step)
    : cfg_(cfg), groups_(groups), device_(device), profiler_(cfg, groups, device, first_step) {
  trace::set_thread_name("main (training loop)", /*sort_index=*/0);
  const bool rank0 = groups_.world->rank() == 0;
  const int snap = cfg.logging.memory_snapshot_step;
  if (snap > 0 && rank0 && snap > cfg.train.max_steps) {
    spdlog::warn("memory snapshot: logging.memory_snapshot_step {} is past train.max_steps {}: none will be written",
                 snap, cfg.train.max_steps);
  } else if (snap > 0 && rank0 && snap < first_step) {
    spdlog::warn("memory snapshot: logging.memory_snapshot_step {} is before this run's first step {} (it resumed "
                 "from a checkpoint in {}): none will be written; give the run its own run.dir",
                 snap, first_step, config::checkpoint_dir(cfg));
  }
  if (cfg.logging.tensorboard && rank0 && first_step > cfg.train.max_steps) {
    spdlog::warn("tensorboard: this run trains no step (it resumed at step {}, train.max_steps is {}): no TensorBoard "
                 "file is written",
                 first_step - 1, cfg.train.max_steps);
  } else if (cfg.logging.tensorboard && rank0) {
    const std::string dir = (std::filesystem::path(cfg.run.dir) / "tensorboard").string();
    try {
      tensorboard_ = std::make_unique<TensorBoardWriter>(dir, first_step);
      spdlog::info("tensorboard: writing {} (`tensorboard --logdir {}`)", tensorboard_->path(), dir);
    } catch (const Error& e) {
      output_failed(cfg_, e.what());
    }
  }
}

std::string Observability::memory_snapshot_path() const {
  return (std::filesystem::path(config::profile_dir(cfg_)) /
          fmt::format("rank_{}.memory_step_{}.json", groups_.world->rank(), cfg_.logging.memory_snapshot_step))
      .string();
}

void Observability::before_step(int64_t step) { profiler_.before_step(step); }

void Observability::after_train_step(int64_t step) {
  if (step != cfg_.logging.memory_snapshot_step) return;
  std::vector<const Allocator*> allocators{&allocator_for(device_)};
  if (!device_.is_cpu()) allocators.push_back(&allocator_for(Device::cpu()));
  const std::string path = memory_snapshot_path();
  try {
    const std::string err = probe_output_dir(config::profile_dir(cfg_));
    FSDP_CHECK(err.empty(), "{}", err);
    write_memory_snapshot(path, step, groups_.world->rank(), allocators);
    if (groups_.world->rank() == 0) spdlog::info("memory snapshot: step {} written to {} (one per rank)", step, path);
  } catch (const Error& e) {
    output_failed(cfg_, fmt::format("logging.memory_snapshot_step: {}", e.what()));
  }
}

void Observability::log_step(const StepMetrics& m) {
  if (tensorboard_) {
    try {
      tensorboard_->write(m);
    } catch (const Error& e) {
      tensorboard_.reset();
      output_failed(cfg_, e.what());
    }
  }
}

void Observability::end_step(int64_t step) { profiler_.after_step(step); }

void Observability::finish(int64_t step) { profiler_.finish(step); }

}  // namespace fsdp::obs
