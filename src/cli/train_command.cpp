// `fsdp_train train`: trains the model the config describes (fsdp/train/trainer.h).
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fsdp/cli/commands.h"
#include "fsdp/train/output_dirs.h"
#include "fsdp/train/preemption.h"
#include "fsdp/train/run_lock.h"
#include "fsdp/train/trainer.h"
#include "run_on_ranks.h"

namespace fsdp::cli {

int train_command(const ConfigArgs& args) {
  static const char* kAbout =
      "Trains the model the config describes; logs one line per train.log_every steps and writes\n"
      "every step to <run.dir>/metrics.jsonl.\n\n";
  return run_on_ranks(args, kAbout, [](const config::Config& cfg, dist::ProcessGroups& groups) {
    // Before the trainer: a signal during start-up (resume, init) still means "checkpoint
    // at the first step boundary and exit", not death.
    train::install_preemption_handlers();
    // Outputs that cannot be written fail now, not at the first save after the whole run.
    const std::vector<std::string> created = train::check_output_dirs(cfg, *groups.world);
    // One run per run.dir (Note [Run lock]), held from before the resume until the exit.
    std::optional<train::RunLock> lock;
    std::optional<train::Trainer> trainer;
    try {
      lock.emplace(train::lock_run_dirs(cfg, *groups.world, created));
      trainer.emplace(cfg, groups, train::TrainerPurpose::Train);
    } catch (...) {
      // Refused at start-up (a mistyped data.path, ...): no empty checkpoints/ left behind,
      // nor one holding only this run's lock file.
      if (lock) train::release_run_lock(*lock, created);
      train::remove_created_dirs(created);
      throw;
    }
    return trainer->run();
  });
}

}  // namespace fsdp::cli
