// `fsdp_train trace-merge` (fsdp/train/trace_merge_main.h).
#include "fsdp/train/trace_merge_main.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/core/text_file.h"
#include "fsdp/train/error_report.h"
#include "fsdp/train/exit_codes.h"

namespace fsdp::train {

namespace fs = std::filesystem;

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

namespace {

nlohmann::json read_trace(const fs::path& path) {
  std::ifstream f(path);
  FSDP_CHECK(f.good(), "cannot read {}: {}", path.string(), std::strerror(errno));
  std::stringstream text;
  text << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    FSDP_FAIL("{} is not JSON (a trace cut short?): {}", path.string(), e.what());
  }
  FSDP_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(),
             "{} is not a Chrome trace (no traceEvents list)", path.string());
  return j;
}

}  // namespace

MergedTraces merge_traces(const std::string& dir, const std::string& output) {
  FSDP_CHECK(fs::is_directory(dir), "trace-merge: {} is not a directory", dir);
  const std::regex name(R"(rank_(\d+)\.trace\.json)");
  std::map<int, fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (std::regex_match(file, m, name)) files[std::stoi(m[1])] = e.path();
  }
  FSDP_CHECK(!files.empty(), "trace-merge: no rank_<r>.trace.json in {} (is logging.profile_active set?)", dir);
  nlohmann::json merged = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  nlohmann::json ranks = nlohmann::json::array();
  nlohmann::json steps;
  MergedTraces result;
  for (const auto& [rank, path] : files) {
    nlohmann::json t = read_trace(path);
    const nlohmann::json other = t.value("otherData", nlohmann::json::object());
    // Files of one recording cover the same steps; a leftover of another run would not.
    if (steps.is_null()) steps = other.value("steps", nlohmann::json());
    FSDP_CHECK(other.value("steps", nlohmann::json()) == steps,
               "trace-merge: {} covers steps {} but {} covers {}: files of different recordings (delete the stale "
               "ones)",
               path.string(), other.value("steps", nlohmann::json()).dump(), files.begin()->second.string(),
               steps.dump());
    for (nlohmann::json& e : t["traceEvents"]) {
      e["pid"] = rank;  // already the rank in files this version wrote; enforced for any other
      merged["traceEvents"].push_back(std::move(e));
    }
    ranks.push_back(other);
    result.ranks.push_back(rank);
    result.world_size = std::max(result.world_size, other.value("world_size", rank + 1));
  }
  merged["otherData"] = {{"merged_from", dir}, {"steps", steps}, {"ranks", ranks}};
  write_text_file(output, merged.dump() + "\n");
  return result;
}

int trace_merge_main(int argc, char** argv) {
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
        throw UsageError{"unknown argument '" + args.raw() + "'"};
      }
    }
    if (dir.empty()) throw UsageError{"DIR (a run's trace directory) is required"};
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: fsdp_train trace-merge: %s\n\n%s", e.message.c_str(), trace_merge_help());
    return kExitUsage;
  }
  if (output.empty()) output = (fs::path(dir) / "trace.json").string();
  try {
    const MergedTraces m = merge_traces(dir, output);
    std::string missing;
    for (int r = 0, k = 0; r < m.world_size; ++r) {
      if (k < int(m.ranks.size()) && m.ranks[size_t(k)] == r) ++k;
      else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    spdlog::info("trace-merge: {} rank(s) into {}{}", m.ranks.size(), output,
                 missing.empty() ? "" : " (no file for rank(s) " + missing + " of " + std::to_string(m.world_size) + ")");
  } catch (const std::exception& e) {
    report_error(e);
    return kExitError;
  }
  return kExitOk;
}

}  // namespace fsdp::train
