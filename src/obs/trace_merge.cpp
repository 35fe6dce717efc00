// The per-rank traces as one (fsdp/obs/trace_merge.h).
#include "fsdp/obs/trace_merge.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/text_file.h"

namespace fsdp::obs {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_trace(const fs::path& path) {
  // A regular file only (a FIFO named rank_0.trace.json once hung trace-merge), and a cut-off
  // file named with where it breaks, not nlohmann's text.
  nlohmann::json j;
  try {
    j = json_file::read(path.string());
  } catch (const Error& e) {
    FSDP_FAIL("{} (a trace cut short?)", e.what());
  }
  FSDP_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(),
             "{} is not a Chrome trace (no traceEvents list)", path.string());
  return j;
}

}  // namespace

MergedTraces merge_traces(const std::string& dir, const std::string& output) {
  std::error_code ec;
  FSDP_CHECK(fs::is_directory(dir, ec), "trace-merge: {} is not a directory{}", dir,
             ec ? " (" + ec.message() + ")" : "");
  const std::regex name(R"(rank_(\d+)\.trace\.json)");
  std::map<int, fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
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
    const nlohmann::json* other_data = json_file::find(t, "otherData");
    const nlohmann::json other =
        other_data != nullptr && other_data->is_object() ? *other_data : nlohmann::json::object();
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
    const nlohmann::json* world = json_file::find(other, "world_size");
    const int64_t size = world != nullptr ? json_file::integer(*world, "otherData.world_size", path.string()) : rank + 1;
    result.world_size = std::max(result.world_size, int(std::clamp<int64_t>(size, 1, 1 << 24)));
  }
  merged["otherData"] = {{"merged_from", dir}, {"steps", steps}, {"ranks", ranks}};
  write_text_file(output, merged.dump() + "\n");
  return result;
}

}  // namespace fsdp::obs
