// The trace recorder (fsdp/core/trace.h): what a trace file holds, how spans nest and drop
// across start/clear/stop, async spans, counters and thread tracks, that CPU ops timed by
// the op profiler become spans of the calling thread, and that a write names its file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../common/trace_checks.h"
#include "fsdp/core/nvtx.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/core/tensor.h"
#include "fsdp/core/trace.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp {
namespace {

nlohmann::json recorded(const std::string& other = "") {
  return nlohmann::json::parse(trace::to_json(7, "rank 7 (test)", other));
}

std::vector<nlohmann::json> events_named(const nlohmann::json& t, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : t["traceEvents"])
    if (e.value("name", "") == name && e["ph"] != "M") out.push_back(e);
  return out;
}

TEST(Trace, OffRecordsNothing) {
  trace::start();
  trace::stop();
  trace::clear();
  ASSERT_FALSE(trace::enabled());
  { const trace::Span s("nothing"); }
  trace::counter("c", {{"v", 1.0}});
  trace::add_bytes_sent(10);
  EXPECT_EQ(trace::async_begin("a", "collective", "{}"), 0u);
  EXPECT_EQ(trace::num_events(), 0u);
}

TEST(Trace, SpansNestAndTheFileIsAChromeTrace) {
  trace::start();
  {
    const trace::Span step("step", "step", "step", 3);
    { const trace::Span a("forward"); }
    {
      const trace::Span b("backward");
      nvtx::Range r("layers.0 backward");  // an NVTX range is a span too
    }
  }
  trace::counter("memory cpu", {{"in use", 10}, {"idle cache", 2}});
  trace::stop();
  const nlohmann::json t = recorded(R"({"steps":[3,3]})");
  EXPECT_EQ(t["otherData"]["steps"], nlohmann::json({3, 3}));
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  test::check_trace_well_formed(t);
  const auto steps = events_named(t, "step");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0]["args"]["step"], 3);
  EXPECT_EQ(steps[0]["pid"], 7);
  ASSERT_EQ(events_named(t, "layers.0 backward").size(), 1u);
  const auto inner = events_named(t, "layers.0 backward")[0], outer = events_named(t, "backward")[0];
  EXPECT_GE(inner["ts"].get<double>(), outer["ts"].get<double>());
  EXPECT_LE(inner["ts"].get<double>() + inner["dur"].get<double>(),
            outer["ts"].get<double>() + outer["dur"].get<double>() + 1e-3);
  const auto c = events_named(t, "memory cpu");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["ph"], "C");
  EXPECT_EQ(c[0]["args"]["in use"], 10);
  bool named = false;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "rank 7 (test)";
  EXPECT_TRUE(named);
}

TEST(Trace, SpansAcrossStartClearOrStopAreDropped) {
  trace::begin("opened before start");  // ignored: not recording
  trace::start();
  trace::end();  // closes the span opened before start: nothing to record
  trace::begin("straddles clear");
  trace::clear();
  trace::end();
  { const trace::Span kept("kept"); }
  trace::begin("open at stop");
  trace::stop();
  trace::end();
  trace::start();
  { const trace::Span after("after restart"); }  // the stale entry of "open at stop" is discarded
  trace::stop();
  const nlohmann::json t = recorded();
  EXPECT_TRUE(events_named(t, "kept").empty()) << "a new start drops the earlier recording";
  EXPECT_EQ(events_named(t, "after restart").size(), 1u);
  EXPECT_TRUE(events_named(t, "straddles clear").empty());
  EXPECT_TRUE(events_named(t, "open at stop").empty());
  EXPECT_TRUE(events_named(t, "opened before start").empty());
}

TEST(Trace, AsyncSpansCountersAndThreads) {
  trace::start();
  const uint64_t a = trace::async_begin("all_gather", "collective", trace::args({{"bytes", uint64_t(64)}}));
  const uint64_t b = trace::async_begin("reduce_scatter", "collective", "{}");
  trace::async_end(a, "all_gather", "collective");
  trace::async_end(b, "reduce_scatter", "collective");
  trace::add_bytes_sent(64);
  trace::add_bytes_sent(32);
  std::thread worker([] {
    trace::set_thread_name("loader worker 0");
    const trace::Span s("load micro-batch", "data", "index", 5);
  });
  worker.join();
  trace::stop();
  const nlohmann::json t = recorded();
  test::check_trace_well_formed(t);
  const auto ag = events_named(t, "all_gather");
  ASSERT_EQ(ag.size(), 2u);
  EXPECT_EQ(ag[0]["ph"], "b");
  EXPECT_EQ(ag[1]["ph"], "e");
  EXPECT_EQ(ag[0]["id"], ag[1]["id"]);
  EXPECT_EQ(ag[0]["args"]["bytes"], 64);
  const auto sent = events_named(t, "bytes sent");
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1]["args"]["bytes"], 96) << "the counter is the running total";
  const auto load = events_named(t, "load micro-batch");
  ASSERT_EQ(load.size(), 1u);
  std::string thread_name;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == load[0]["tid"]) thread_name = e["args"]["name"];
  EXPECT_EQ(thread_name, "loader worker 0");
}

TEST(Trace, CpuOpsTimedByTheOpProfilerAreSpansOfTheCallingThread) {
  const bool was_on = op_profile::enabled();
  Tensor x = Tensor::zeros({1000}, DType::F32);
  op_profile::reset();
  trace::start();
  EXPECT_TRUE(op_profile::enabled()) << "a recording times every op";
  {
    const trace::Span s("outer");
    fill_(x, 2.0);
    fill_(x, 3.0);
  }
  trace::stop();
  EXPECT_EQ(op_profile::enabled(), was_on) << "stop puts the op profiler back";
  const nlohmann::json t = recorded();
  test::check_trace_well_formed(t);
  int64_t fills = 0;
  for (const auto& e : t["traceEvents"])
    if (e.value("cat", "") == "op" && e["name"] == "fill") ++fills;
  int64_t counted = 0;
  for (const auto& r : op_profile::report())
    if (r.op == "fill") counted = r.calls;
  EXPECT_EQ(fills, 2);
  EXPECT_EQ(counted, fills);
}

TEST(Trace, WriteIsAtomicAndNamesAnUnwritablePath) {
  const auto dir = std::filesystem::temp_directory_path() / "fsdp_test_trace_write";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  trace::start();
  { const trace::Span s("x"); }
  trace::stop();
  trace::write((dir / "t.json").string(), 0, "rank 0", "");
  EXPECT_TRUE(std::filesystem::exists(dir / "t.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "t.json.tmp"));
  std::ifstream f(dir / "t.json");
  const nlohmann::json parsed = nlohmann::json::parse(f);
  EXPECT_EQ(events_named(parsed, "x").size(), 1u);
  try {
    trace::write("/dev/null/t.json", 0, "rank 0", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/null/t.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
