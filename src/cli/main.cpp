// fsdp_train: the command line. Picks the subcommand by name (one file each in src/cli/,
// fsdp/cli/commands.h) and answers --version and --help; no command holds training logic.
#include <cstdio>
#include <string>

#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/cuda_libraries.h"
#include "fsdp/train/exit_codes.h"

namespace {

using fsdp::train::kExitOk;
using fsdp::train::kExitUsage;

const char* kUsage =
    "usage: fsdp_train <command> [options]\n"
    "\n"
    "commands:\n"
    "  train        --config FILE [--set section.key=value]...   train a model\n"
    "  eval         --config FILE [--checkpoint DIR] [--split NAME] [--set ...]\n"
    "                                                            the loss over eval.batches batches\n"
    "  prepare      --tokenizer PATH --output DIR INPUT...       tokenize text into training shards\n"
    "  generate     --checkpoint DIR --prompt TEXT               continue a prompt with a model\n"
    "               --checkpoint DIR --chat --user TEXT          a chat model's reply to a conversation\n"
    "  export       --checkpoint DIR --output HF_DIR             write a Hugging Face folder\n"
    "  plan         --config FILE [--ranks N] [--device-memory SIZE]\n"
    "                                                            memory per rank, the largest micro-batch\n"
    "  trace-merge  DIR [--output FILE]                          merge a run's per-rank traces into one\n"
    "  tokenize     --tokenizer PATH < LINES                     the token ids of each line (--decode: back)\n"
    "\n"
    "options:\n"
    "  --help       this text (with a command: its options and every config key)\n"
    "  --version    print the version, and which CUDA libraries a GPU run would load\n";

// train and eval's command line; --version and --help are answered for any command.
struct ParsedLine {
  fsdp::cli::ConfigArgs config;
  bool version = false;
};

ParsedLine parse_args(int argc, char** argv) {
  ParsedLine a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw fsdp::UsageError{std::string(flag) + " needs a value"};
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      a.config.help = true;
    } else if (arg == "--version") {
      a.version = true;
    } else if (arg == "--config") {
      a.config.config_path = value("--config");
    } else if (arg.starts_with("--config=")) {
      a.config.config_path = arg.substr(9);
    } else if (arg == "--split" || arg.starts_with("--split=")) {
      a.config.split = arg == "--split" ? value("--split") : arg.substr(8);
      // An empty one once evaluated eval.split's default (val) without a word.
      if (a.config.split.empty()) throw fsdp::UsageError{"--split needs a split name (e.g. val or train), not ''"};
    } else if (arg == "--checkpoint") {
      a.config.checkpoint = value("--checkpoint");
    } else if (arg.starts_with("--checkpoint=")) {
      a.config.checkpoint = arg.substr(13);
    } else if (arg == "--init") {
      a.config.init = true;
    } else if (arg == "--set") {
      a.config.overrides.push_back(value("--set"));
    } else if (arg.starts_with("--set=")) {
      a.config.overrides.push_back(arg.substr(6));
    } else if (a.config.command.empty() && !arg.starts_with("-")) {
      a.config.command = arg;
    } else if (!arg.starts_with("-") && (arg.ends_with(".yaml") || arg.ends_with(".yml"))) {
      throw fsdp::UsageError{"unexpected argument '" + arg + "' (did you mean --config " + arg + "?)"};
    } else {
      throw fsdp::unknown_argument(arg, {"--config", "--set", "--split", "--checkpoint", "--init", "--help",
                                         "--version"});
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  // The commands with flags of their own (and no config): hand them the rest of the line.
  if (argc >= 2) {
    const std::string name = argv[1];
    if (name == "prepare") return fsdp::cli::prepare_command(argc - 1, argv + 1);
    if (name == "generate") return fsdp::cli::generate_command(argc - 1, argv + 1);
    if (name == "export") return fsdp::cli::export_command(argc - 1, argv + 1);
    if (name == "trace-merge") return fsdp::cli::trace_merge_command(argc - 1, argv + 1);
    if (name == "plan") return fsdp::cli::plan_command(argc - 1, argv + 1);
    if (name == "tokenize") return fsdp::cli::tokenize_command(argc - 1, argv + 1);
  }
  ParsedLine line;
  try {
    line = parse_args(argc, argv);
  } catch (const fsdp::UsageError& e) {
    // The command the line named, if it got that far.
    const std::string command = argc >= 2 && argv[1][0] != '-' ? argv[1] : "";
    fsdp::cli::print_usage_error(command == "train" || command == "eval" ? command : "", e.message);
    return kExitUsage;
  }
  if (line.version) {
    // The second line says which CUDA libraries a GPU run would load, from where (the
    // package's check.sh and its CI test read it).
    std::printf("fsdp_train %s\n%s\n", FSDP_VERSION, fsdp::cuda::process_libraries_line().c_str());
    return kExitOk;
  }
  if (line.config.command.empty()) {
    std::fputs(kUsage, line.config.help ? stdout : stderr);
    return line.config.help ? kExitOk : kExitUsage;
  }
  if (line.config.command == "train") return fsdp::cli::train_command(line.config);
  if (line.config.command == "eval") return fsdp::cli::eval_command(line.config);
  fsdp::cli::print_usage_error("", "unknown command '" + line.config.command + "'");
  return kExitUsage;
}
