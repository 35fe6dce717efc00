// `fsdp_train eval`: the mean loss of the config's model over eval.batches batches.
#include <cstdio>

#include "fsdp/cli/commands.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/trainer.h"
#include "run_on_ranks.h"

namespace fsdp::cli {

int eval_command(const ConfigArgs& args) {
  static const char* kAbout =
      "Evaluates the model (model.init_from, or the seeded initialisation) on eval.batches\n"
      "batches of the validation shards (eval.split, default val; --split NAME sets it: --split\n"
      "train evaluates the training shards); the last line of output is `eval_loss <value>`.\n\n";
  return run_on_ranks(args, kAbout, [](const config::Config& cfg, dist::ProcessGroups& groups) {
    train::Trainer trainer(cfg, groups, train::TrainerPurpose::Evaluate);
    const double loss = trainer.evaluate(cfg.eval.batches);
    if (groups.world_info.rank == 0) std::printf("eval_loss %.6f\n", loss);
    return train::kExitOk;
  });
}

}  // namespace fsdp::cli
