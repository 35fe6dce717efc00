// `fsdp_train eval`: the mean loss of the config's model over the trained targets of
// eval.batches batches (0: the whole split), and how many targets that was.
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "fsdp/cli/commands.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/trainer.h"
#include "run_on_ranks.h"

namespace fsdp::cli {

int eval_command(const ConfigArgs& args) {
  static const char* kAbout =
      "Evaluates a model on eval.batches batches of the validation shards (eval.split, default val;\n"
      "--split NAME sets it: --split train evaluates the training shards); eval.batches: 0 evaluates\n"
      "every sample of the split once. The loss is over trained targets only: on SFT data (shards\n"
      "with a loss mask from `prepare`) the answers, not the prompts, as training's loss. Prints\n"
      "`eval_trained_tokens <count>` and, last, `eval_loss <value>`. The model, the first of:\n"
      "  --checkpoint DIR  a checkpoint (step_<N>/) or a checkpoint.dir, whose newest complete one is used\n"
      "  the run's own     the newest checkpoint in checkpoint.dir (<run.dir>/checkpoints), as train resumes\n"
      "  model.init_from   a Hugging Face folder\n"
      "  --init            the seeded random initialisation (model.init_std, train.seed), asked for by name\n"
      "Without any of them eval refuses (exit 2): there is no trained model to evaluate.\n\n";
  return run_on_ranks(args, kAbout, [&args](const config::Config& cfg, dist::ProcessGroups& groups) {
    train::Trainer trainer(cfg, groups, train::TrainerPurpose::Evaluate);
    if (trainer.resumed_from().empty() && cfg.model.init_from.empty() && !args.init) {
      throw config::ConfigError(fmt::format(
          "nothing to evaluate: no checkpoint in {} (checkpoint.resume: {}) and no model.init_from; give --checkpoint "
          "DIR, set run.dir (or model.init_from) to the model to evaluate, or --init to evaluate the seeded "
          "initialisation",
          config::checkpoint_dir(cfg), cfg.checkpoint.resume));
    }
    const train::Trainer::EvalResult r = trainer.evaluate_split(cfg.eval.batches);
    if (groups.world_info.rank == 0) {
      spdlog::info("evaluated {} samples of the '{}' split{}: {} trained targets of {}", r.samples, cfg.eval.split,
                   cfg.eval.batches == 0 ? " (all of it, once)" : "", r.trained_targets, r.targets);
      std::printf("eval_trained_tokens %lld\neval_loss %.6f\n", static_cast<long long>(r.trained_targets), r.loss);
    }
    return train::kExitOk;
  });
}

}  // namespace fsdp::cli
