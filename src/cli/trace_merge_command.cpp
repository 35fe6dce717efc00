// `fsdp_train trace-merge DIR [--output FILE]`: a run's per-rank traces as one Chrome trace
// (fsdp/obs/trace_merge.h), for ui.perfetto.dev or chrome://tracing.
#include <cstdio>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/obs/trace_merge.h"
#include "fsdp/train/exit_codes.h"

namespace fsdp::cli {

namespace fs = std::filesystem;
using train::kExitError;
using train::kExitOk;
using train::kExitUsage;

const char* trace_merge_help() {
  return "usage: fsdp_train trace-merge DIR [--output FILE]\n"
         "\n"
         "Merges the per-rank traces of a run (DIR/rank_<r>.trace.json, written by the trace schedule\n"
         "logging.profile_wait/warmup/active) into one Chrome trace with a process per rank, for\n"
         "ui.perfetto.dev or chrome://tracing.\n"
         "\n"
         "options:\n"
         "  --output FILE   where to write it (default DIR/trace.json)\n"
         "\n"
         "Exit status: 0 done, 1 the merge failed, 2 usage error.\n";
}

int trace_merge_command(int argc, char** argv) {
  apply_log_level_from_env();
  std::string dir, output;
  try {
    ArgCursor args(argc, argv);
    while (args.next()) {
      const std::string& a = args.arg();
      if (a == "--help" || a == "-h") {
        std::fputs(trace_merge_help(), stdout);
        return kExitOk;
      } else if (a == "--output") {
        output = args.value();
      } else if (!a.starts_with("-") && dir.empty()) {
        dir = a;
      } else {
        throw unknown_argument(args.raw(), {"--help", "--output"});
      }
    }
    if (dir.empty()) throw UsageError{"DIR (a run's trace directory) is required"};
  } catch (const UsageError& e) {
    print_usage_error("trace-merge", e.message);
    return kExitUsage;
  }
  if (output.empty()) output = (fs::path(dir) / "trace.json").string();
  try {
    const obs::MergedTraces m = obs::merge_traces(dir, output);
    std::string missing;
    for (int r = 0, k = 0; r < m.world_size; ++r) {
      if (k < int(m.ranks.size()) && m.ranks[size_t(k)] == r) ++k;
      else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    spdlog::info("trace-merge: {} rank(s) into {}{}", m.ranks.size(), output,
                 missing.empty() ? "" : " (no file for rank(s) " + missing + " of " + std::to_string(m.world_size) + ")");
  } catch (const std::exception& e) {
    report_error("trace-merge", e);
    return kExitError;
  }
  return kExitOk;
}

}  // namespace fsdp::cli
