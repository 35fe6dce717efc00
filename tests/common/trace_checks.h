// Checks every trace test makes on a Chrome trace document (fsdp/core/trace.h): events in
// time order, spans nesting on each track, async spans paired. Header-only, gtest
// assertions; shared by tests/cpu, tests/mpi and tests/cuda_mpi.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdp::test {

// ts and dur are written with 3 decimals (nanoseconds), each rounded on its own.
inline constexpr double kTraceRoundingUs = 0.002;

inline double span_end(const nlohmann::json& e) { return e["ts"].get<double>() + e["dur"].get<double>(); }

inline void check_trace_well_formed(const nlohmann::json& t) {
  ASSERT_TRUE(t.contains("traceEvents") && t["traceEvents"].is_array());
  double last_ts = -1;
  std::map<std::pair<int, int>, std::vector<nlohmann::json>> open;  // (pid, tid) -> enclosing spans
  std::map<std::string, nlohmann::json> async_open;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M") continue;
    const double ts = e["ts"].get<double>();
    EXPECT_GE(ts, 0.0) << e.dump();
    EXPECT_GE(ts, last_ts) << "timestamps go back: " << e.dump();
    last_ts = ts;
    if (ph == "X") {
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      auto& stack = open[{e["pid"].get<int>(), e["tid"].get<int>()}];
      while (!stack.empty() && span_end(stack.back()) <= ts + kTraceRoundingUs) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(span_end(e), span_end(stack.back()) + kTraceRoundingUs)
            << e["name"] << " overlaps " << stack.back()["name"] << " without nesting in it";
      }
      stack.push_back(e);
    } else if (ph == "b") {
      const std::string id = e["id"];
      EXPECT_FALSE(async_open.count(id)) << "async id used twice: " << e.dump();
      async_open[id] = e;
    } else if (ph == "e") {
      const std::string id = e["id"];
      ASSERT_TRUE(async_open.count(id)) << "async end without a begin: " << e.dump();
      EXPECT_EQ(async_open[id]["name"], e["name"]);
      async_open.erase(id);
    } else {
      EXPECT_EQ(ph, "C") << e.dump();
    }
  }
  EXPECT_TRUE(async_open.empty()) << async_open.size() << " async span(s) never ended, e.g. "
                                  << (async_open.empty() ? "" : async_open.begin()->second.dump());
}

// The X spans of a track (by thread or stream name), in file order.
inline std::map<std::string, std::vector<nlohmann::json>> spans_by_track(const nlohmann::json& t) {
  std::map<int, std::string> names;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"].get<int>()] = e["args"]["name"];
  std::map<std::string, std::vector<nlohmann::json>> out;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const int tid = e["tid"].get<int>();
    out[names.count(tid) ? names[tid] : "tid " + std::to_string(tid)].push_back(e);
  }
  return out;
}

}  // namespace fsdp::test
