// fsdp_train: the command line. Subcommands parse their flags here and hand a validated
// Config to the library; this file holds no training logic.
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fsdp/config/config.h"
#include "fsdp/core/error.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/dist/watchdog.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/error_report.h"
#include "fsdp/train/export_main.h"
#include "fsdp/train/generate_main.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/output_dirs.h"
#include "fsdp/train/plan_main.h"
#include "fsdp/train/preemption.h"
#include "fsdp/train/prepare_main.h"
#include "fsdp/train/trace_merge_main.h"
#include "fsdp/train/trainer.h"

namespace {

using fsdp::train::kExitError;
using fsdp::train::kExitOk;
using fsdp::train::kExitUsage;

const char* kUsage =
    "usage: fsdp_train <command> [options]\n"
    "\n"
    "commands:\n"
    "  train --config FILE [--set section.key=value]...   train a model\n"
    "  eval  --config FILE [--split NAME] [--set ...]     mean loss over eval.batches batches\n"
    "  prepare --tokenizer MODEL --output DIR INPUT...    tokenize text into training shards\n"
    "  generate --checkpoint DIR --tokenizer MODEL --prompt TEXT   continue a prompt with a model\n"
    "  export --checkpoint DIR --output HF_DIR                   write a Hugging Face Llama folder\n"
    "  trace-merge DIR [--output FILE]                    merge a run's per-rank traces into one\n"
    "  plan  --config FILE [--ranks N] [--device-memory SIZE]    memory per rank, the largest micro-batch that fits\n"
    "\n"
    "options:\n"
    "  --help       this text (with a command: its options and every config key)\n"
    "  --version    print the version\n";

struct Args {
  std::string command;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string split;  // eval --split NAME: eval.split
  bool help = false;
  bool version = false;
};

struct UsageError {
  std::string message;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw UsageError{std::string(flag) + " needs a value"};
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--version") {
      a.version = true;
    } else if (arg == "--config") {
      a.config_path = value("--config");
    } else if (arg.starts_with("--config=")) {
      a.config_path = arg.substr(9);
    } else if (arg == "--split") {
      a.split = value("--split");
    } else if (arg.starts_with("--split=")) {
      a.split = arg.substr(8);
    } else if (arg == "--set") {
      a.overrides.push_back(value("--set"));
    } else if (arg.starts_with("--set=")) {
      a.overrides.push_back(arg.substr(6));
    } else if (a.command.empty() && !arg.starts_with("-")) {
      a.command = arg;
    } else {
      throw UsageError{"unknown argument '" + arg + "'"};
    }
  }
  return a;
}

void print_command_help(const std::string& command) {
  std::printf("usage: fsdp_train %s --config FILE [--set section.key=value]...\n\n", command.c_str());
  if (command == "train") {
    std::printf("Trains the model the config describes; logs one line per train.log_every steps and writes\n"
                "every step to <run.dir>/metrics.jsonl.\n\n");
  } else {
    std::printf("Evaluates the model (model.init_from, or the seeded initialisation) on eval.batches\n"
                "batches of the validation shards (eval.split, default val; --split NAME sets it: --split\n"
                "train evaluates the training shards); the last line of output is `eval_loss <value>`.\n\n");
  }
  std::printf("%s", fsdp::config::describe_keys().c_str());  // its own "Config keys" header
}

fsdp::config::Config load(const Args& a) {
  if (a.config_path.empty()) throw UsageError{"fsdp_train " + a.command + ": --config FILE is required"};
  std::vector<std::string> overrides = a.overrides;
  if (!a.split.empty()) {
    if (a.command != "eval") throw UsageError{"--split is an option of fsdp_train eval (train evaluates eval.split)"};
    overrides.push_back("eval.split=" + a.split);  // after the --set ones: the flag wins
  }
  return fsdp::config::load_config(a.config_path, overrides);
}

// Rank 0 speaks for the job; other ranks report only warnings and errors, prefixed with
// their rank so a failing rank is identifiable in a merged Slurm log.
void setup_logging(const fsdp::config::Config& cfg, int rank) {
  if (rank == 0) {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_level(spdlog::level::from_str(cfg.logging.level));
    fsdp::train::apply_log_level_from_env();  // SPDLOG_LEVEL=debug beats the config
  } else {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(rank) + "] %v");
    spdlog::set_level(spdlog::level::warn);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // prepare has flags of its own (and no config): hand it the rest of the command line.
  if (argc >= 2 && std::string(argv[1]) == "prepare") return fsdp::train::prepare_main(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "generate") return fsdp::train::generate_main(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "export") return fsdp::train::export_main(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "trace-merge") return fsdp::train::trace_merge_main(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "plan") return fsdp::train::plan_main(argc - 1, argv + 1);
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n\n%s", e.message.c_str(), kUsage);
    return kExitUsage;
  }
  if (args.version) {
    std::printf("fsdp_train %s\n", FSDP_VERSION);
    return kExitOk;
  }
  if (args.command.empty()) {
    std::fputs(kUsage, args.help ? stdout : stderr);
    return args.help ? kExitOk : kExitUsage;
  }
  if (args.command != "train" && args.command != "eval") {
    std::fprintf(stderr, "error: unknown command '%s'\n\n%s", args.command.c_str(), kUsage);
    return kExitUsage;
  }
  if (args.help) {
    print_command_help(args.command);
    return kExitOk;
  }

  fsdp::config::Config cfg;
  try {
    cfg = load(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    return kExitUsage;
  } catch (const fsdp::config::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  // From here on every rank runs the same code; an error on any rank aborts all of them
  // (a rank left alone inside a collective would hang until the job's time limit).
  fsdp::dist::ProcessGroups groups;
  int code = kExitOk;
  try {
    // Armed before the first collective (start-up's config check included).
    fsdp::dist::configure_watchdog({cfg.dist.timeout_s, fsdp::train::kExitPeerFailure,
                                    [](const fsdp::dist::WatchdogReport& r) {
                                      spdlog::error("{}", r.line());
                                      spdlog::default_logger()->flush();
                                    }});
    try {
      groups = fsdp::dist::init_process_groups(fsdp::train::shard_group_size(cfg));
    } catch (const fsdp::Error& e) {
      FSDP_FAIL("cannot set up the ranks for fsdp.sharding_strategy {} with fsdp.shard_group_size {}: {}",
                fsdp::config::to_string(cfg.fsdp.sharding_strategy), cfg.fsdp.shard_group_size, e.what());
    }
    setup_logging(cfg, groups.world_info.rank);
    fsdp::train::check_launch(cfg, groups);
    spdlog::info("fsdp_train {} {}: {} rank(s) on {} node(s), launched by {}; effective config\n{}", FSDP_VERSION,
                 args.command, groups.world_info.size, groups.world_info.num_nodes, groups.world_info.launcher,
                 fsdp::config::dump_yaml(cfg));
    // Before the trainer: a signal during start-up (resume, init) still means "checkpoint
    // at the first step boundary and exit", not death.
    if (args.command == "train") {
      fsdp::train::install_preemption_handlers();
      // Outputs that cannot be written fail now, not at the first save after the whole run.
      fsdp::train::check_output_dirs(cfg, *groups.world);
    }
    fsdp::train::Trainer trainer(cfg, groups,
                                 args.command == "train" ? fsdp::train::TrainerPurpose::Train
                                                         : fsdp::train::TrainerPurpose::Evaluate);
    if (args.command == "train") {
      code = trainer.run();
    } else {
      const double loss = trainer.evaluate(cfg.eval.batches);
      if (groups.world_info.rank == 0) std::printf("eval_loss %.6f\n", loss);
    }
  } catch (const std::exception& e) {
    fsdp::train::report_error(e);
    const bool usage = dynamic_cast<const fsdp::config::ConfigError*>(&e) != nullptr;
    if (groups.world && groups.world->size() > 1) fsdp::dist::abort_all(usage ? kExitUsage : kExitError);
    return usage ? kExitUsage : kExitError;
  }
  fsdp::dist::shutdown_distributed();
  return code;
}
