// The subcommands of fsdp_train, one file each in src/cli/: their flags, their --help, and
// the call into the library; src/cli/main.cpp picks one by name. Each returns the process's
// exit code (fsdp/train/exit_codes.h): 0 done, 2 a usage or config error (nothing ran), 1 a
// failure after starting; train also 75 (preempted, checkpoint written) and 76 (a peer failed).
#pragma once

#include <string>
#include <vector>

namespace fsdp::cli {

// train and eval share one command line (src/cli/main.cpp parses it): a config file, its
// --set overrides, and eval's --split.
struct ConfigArgs {
  std::string command;  // "train" or "eval"
  std::string config_path;
  std::vector<std::string> overrides;
  std::string split;  // eval --split NAME: eval.split
  std::string checkpoint;  // eval --checkpoint DIR: a step_<N>/ or a checkpoint.dir (its newest)
  bool init = false;       // eval --init: the seeded initialisation, knowingly
  bool help = false;
};
// Trains the model the config describes (fsdp/train/trainer.h).
int train_command(const ConfigArgs& args);
// The mean loss over eval.batches batches; the last line printed is `eval_loss <value>`.
int eval_command(const ConfigArgs& args);

// The commands with flags of their own: argv[0] is the command's name, its flags follow.
//   prepare      text / JSONL corpora into tokenized shards (fsdp/data/prepare.h)
//   generate     continue a prompt with a trained or imported model, printed as it grows
//   export       a checkpoint as a Hugging Face or PEFT folder (fsdp/train/checkpoint_export.h)
//   plan         the memory plan of a run, without allocating (fsdp/plan/memory_plan.h); 1 when
//                the run does not fit
//   trace-merge  a run's per-rank traces as one (fsdp/obs/trace_merge.h)
//   tokenize     a tokenizer's ids for lines of stdin, or their text back (fsdp/data/tokenizer.h)
int prepare_command(int argc, char** argv);
int generate_command(int argc, char** argv);
int export_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int trace_merge_command(int argc, char** argv);
int tokenize_command(int argc, char** argv);

// The text each prints for --help.
const char* prepare_help();
const char* generate_help();
const char* export_help();
const char* plan_help();
const char* trace_merge_help();
const char* tokenize_help();

}  // namespace fsdp::cli
