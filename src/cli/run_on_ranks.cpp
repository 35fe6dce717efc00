// The start-up and error handling train and eval share; see run_on_ranks.h.
#include "run_on_ranks.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "fsdp/cli/error_report.h"
#include "fsdp/config/model_options.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/dist/watchdog.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/launch_checks.h"

namespace fsdp::cli {

namespace {

using train::kExitError;
using train::kExitOk;
using train::kExitUsage;

config::Config load(const ConfigArgs& a) {
  if (a.config_path.empty()) throw UsageError{"fsdp_train " + a.command + ": --config FILE is required"};
  std::vector<std::string> overrides = a.overrides;
  if (!a.split.empty()) {
    if (a.command != "eval") throw UsageError{"--split is an option of fsdp_train eval (train evaluates eval.split)"};
    overrides.push_back("eval.split=" + a.split);  // after the --set ones: the flag wins
  }
  if ((!a.checkpoint.empty() || a.init) && a.command != "eval")
    throw UsageError{"--checkpoint and --init are options of fsdp_train eval (train resumes by checkpoint.resume)"};
  if (!a.checkpoint.empty() && a.init) throw UsageError{"--checkpoint and --init exclude each other"};
  if (!a.checkpoint.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(a.checkpoint, ec))
      throw UsageError{"--checkpoint " + a.checkpoint + ": no such checkpoint or folder"};
    // A step_<N>/ is taken as it is; a checkpoint.dir, its newest complete checkpoint.
    const bool one = std::filesystem::exists(std::filesystem::path(a.checkpoint) / "manifest.json", ec);
    overrides.push_back(one ? "checkpoint.resume=" + a.checkpoint : "checkpoint.dir=" + a.checkpoint);
    if (!one) overrides.push_back("checkpoint.resume=auto");
  }
  return config::load_config(a.config_path, overrides);
}

// Colour codes only for a person at a terminal: not into a file or a pipe, and not under a
// launcher (mpirun gives each rank a pseudo-terminal even when its own output goes to a
// file; srun's goes to the job's log). NO_COLOR (no-color.org) turns it off everywhere.
bool use_colour(const dist::WorldInfo& world) {
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) != 0 && world.launcher == "none" && std::getenv("NO_COLOR") == nullptr &&
         !(term != nullptr && std::string(term) == "dumb");
}

// Rank 0 speaks for the job, and a training run's rank 0 also appends everything it says
// to <run.dir>/train.log (a resumed run continues the file); other ranks report only
// warnings and errors, prefixed with their rank so a failing rank is identifiable in a
// merged Slurm log.
void setup_logging(const config::Config& cfg, const dist::WorldInfo& world, bool train) {
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>(use_colour(world) ? spdlog::color_mode::always
                                                                                          : spdlog::color_mode::never);
  std::vector<spdlog::sink_ptr> sinks{console};
  const std::string log_path = (std::filesystem::path(cfg.run.dir) / "train.log").string();
  std::string log_error;
  if (world.rank == 0 && train) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_path, /*truncate=*/false));
    } catch (const spdlog::spdlog_ex& e) {
      log_error = e.what();
    }
  }
  auto logger = std::make_shared<spdlog::logger>("fsdp_train", sinks.begin(), sinks.end());
  spdlog::set_default_logger(logger);
  if (world.rank == 0) {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_level(spdlog::level::from_str(cfg.logging.level));
    apply_log_level_from_env();  // SPDLOG_LEVEL=debug beats the config
  } else {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(world.rank) + "] %v");
    spdlog::set_level(spdlog::level::warn);
  }
  logger->flush_on(spdlog::level::info);  // a killed job keeps its train.log up to the last line
  if (!log_error.empty()) spdlog::warn("run.dir: cannot write {} ({}): logging to the console only", log_path, log_error);
}

// "1 rank", "4 ranks".
std::string plural(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

int run_on_ranks(const ConfigArgs& args, const char* about, const RankBody& body) {
  if (args.help) {
    std::printf("usage: fsdp_train %s --config FILE [--set section.key=value]...\n\n", args.command.c_str());
    std::printf("%s", about);
    std::printf("%s", config::describe_keys().c_str());  // its own "Config keys" header
    return kExitOk;
  }
  config::Config cfg;
  try {
    cfg = load(args);
  } catch (const UsageError& e) {
    print_usage_error(args.command, e.message);
    return kExitUsage;
  } catch (const config::ConfigError& e) {
    print_error(args.command, e.what());
    return kExitUsage;
  }
  // From here on every rank runs the same code; an error on any rank aborts all of them
  // (a rank left alone inside a collective would hang until the job's time limit).
  dist::ProcessGroups groups;
  int code = kExitOk;
  try {
    // Armed before the first collective (start-up's config check included).
    dist::configure_watchdog({cfg.dist.timeout_s, train::kExitPeerFailure,
                              [](const dist::WatchdogReport& r) {
                                spdlog::error("{}", r.line());
                                spdlog::default_logger()->flush();
                              },
                              true,
                              [](const std::string& line) {
                                spdlog::error("{}", line);
                                spdlog::default_logger()->flush();
                              }});
    groups = dist::init_world_groups();
    // The layout against the world's size, as `plan` judges it: a config error (exit 2) on
    // every rank, not a failure of the run (it was once 1, through MPI_Abort).
    train::check_mesh(cfg, groups.world_info);
    try {
      groups = dist::split_process_groups(groups, train::mesh_spec(cfg));
    } catch (const Error& e) {
      // The config's words for the key (0 = the ranks of one node), not dist's internal ones.
      FSDP_FAIL("cannot set up the ranks for fsdp.sharding_strategy {} with fsdp.shard_group_size {}: {}; "
                "fsdp.shard_group_size must be a divisor of the world size, or 0 for the ranks of one node",
                config::to_string(cfg.fsdp.sharding_strategy), cfg.fsdp.shard_group_size, e.what());
    }
    setup_logging(cfg, groups.world_info, args.command == "train");
    train::check_launch(cfg, groups);
    const dist::WorldInfo& w = groups.world_info;
    // One line here; the whole effective config at debug level (and, for a training run,
    // in <run.dir>/config.yaml and every checkpoint's manifest).
    spdlog::info("fsdp_train {} {}: {} on {}, launched by {}{}; config {}{}", FSDP_VERSION, args.command,
                 plural(w.size, "rank"), plural(w.num_nodes, "node"), w.launcher,
                 w.size > 1 ? " (the ranks met through " + w.bootstrap + ")" : "", args.config_path,
                 args.overrides.empty() ? std::string() : " with " + plural(int(args.overrides.size()), "--set"));
    spdlog::debug("effective config:\n{}", config::dump_yaml(cfg));
    code = body(cfg, groups);
  } catch (const std::exception& e) {
    // Every rank that failed says so; beyond rank 0, with its rank.
    const int rank = groups.world ? groups.world->rank() : 0;
    print_error(args.command, rank == 0 ? std::string(e.what()) : "rank " + std::to_string(rank) + ": " + e.what());
    log_where(e);
    const bool usage = dynamic_cast<const config::ConfigError*>(&e) != nullptr;
    if (groups.world && groups.world->size() > 1) dist::abort_all(usage ? kExitUsage : kExitError);
    return usage ? kExitUsage : kExitError;
  }
  dist::shutdown_distributed();
  return code;
}

}  // namespace fsdp::cli
