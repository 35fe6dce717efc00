// train and eval: the two commands that run a config on every rank. What they share lives
// here: the config from --config and --set, --help with every config key, the watchdog, the
// process groups, the log, the launch checks and the effective config's log line, and how an
// error on any rank ends all of them with one exit code.
#pragma once

#include <functional>

#include "fsdp/cli/commands.h"
#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::cli {

// The command's own part, run on every rank once the ranks are up; returns the exit code.
using RankBody = std::function<int(const config::Config& cfg, dist::ProcessGroups& groups)>;

// `about` is the paragraph --help prints between the usage line and the config keys.
int run_on_ranks(const ConfigArgs& args, const char* about, const RankBody& body);

}  // namespace fsdp::cli
