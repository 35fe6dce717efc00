// The start-up and error handling train and eval share; see run_on_ranks.h.
#include "run_on_ranks.h"

#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fsdp/cli/error_report.h"
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
  return config::load_config(a.config_path, overrides);
}

// Rank 0 speaks for the job; other ranks report only warnings and errors, prefixed with
// their rank so a failing rank is identifiable in a merged Slurm log.
void setup_logging(const config::Config& cfg, int rank) {
  if (rank == 0) {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_level(spdlog::level::from_str(cfg.logging.level));
    apply_log_level_from_env();  // SPDLOG_LEVEL=debug beats the config
  } else {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(rank) + "] %v");
    spdlog::set_level(spdlog::level::warn);
  }
}

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
    std::fprintf(stderr, "error: %s\n", e.message.c_str());
    return kExitUsage;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
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
    try {
      groups = dist::init_process_groups(train::shard_group_size(cfg));
    } catch (const Error& e) {
      FSDP_FAIL("cannot set up the ranks for fsdp.sharding_strategy {} with fsdp.shard_group_size {}: {}",
                config::to_string(cfg.fsdp.sharding_strategy), cfg.fsdp.shard_group_size, e.what());
    }
    setup_logging(cfg, groups.world_info.rank);
    train::check_launch(cfg, groups);
    spdlog::info("fsdp_train {} {}: {} rank(s) on {} node(s), launched by {}{}; effective config\n{}", FSDP_VERSION,
                 args.command, groups.world_info.size, groups.world_info.num_nodes, groups.world_info.launcher,
                 groups.world_info.size > 1 ? " (the ranks met through " + groups.world_info.bootstrap + ")" : "",
                 config::dump_yaml(cfg));
    code = body(cfg, groups);
  } catch (const std::exception& e) {
    report_error(e);
    const bool usage = dynamic_cast<const config::ConfigError*>(&e) != nullptr;
    if (groups.world && groups.world->size() > 1) dist::abort_all(usage ? kExitUsage : kExitError);
    return usage ? kExitUsage : kExitError;
  }
  dist::shutdown_distributed();
  return code;
}

}  // namespace fsdp::cli
