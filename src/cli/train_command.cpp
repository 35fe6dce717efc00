// `fsdp_train train`: trains the model the config describes (fsdp/train/trainer.h).
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
    train::check_output_dirs(cfg, *groups.world);
    // One run per run.dir (Note [Run lock]), held from before the resume until the exit.
    const train::RunLock lock = train::lock_run_dirs(cfg, *groups.world);
    train::Trainer trainer(cfg, groups, train::TrainerPurpose::Train);
    return trainer.run();
  });
}

}  // namespace fsdp::cli
