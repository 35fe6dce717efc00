// The trace and the memory snapshot of a FULL_SHARD run over every rank of the job
// (mpi_np2, mpi_np4; skipped on one rank, which runs no collectives): each rank's file
// parses and nests, its steps match the logged step time, every collective of a step is
// there with the byte count the communicator accounts (their sum is the step's comm_bytes
// in metrics.jsonl), the ranks' clocks agree, the files merge, and each rank's memory
// snapshot adds up with gathered parameters in it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "../common/distributed_train_checks.h"
#include "../common/trace_checks.h"
#include "fsdp/obs/trace_merge.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << p;
  return nlohmann::json::parse(f);
}

TEST(Trace, FullShardTraceHoldsEveryCollectiveWithItsBytes) {
  dist::ProcessGroups& groups = test::world_groups();
  dist::Communicator& world = *groups.world;
  if (world.size() < 2) GTEST_SKIP() << "one rank runs no collectives";
  const std::string dir = test::shared_scratch(world, "fsdp_mpi_trace");
  // Odd shapes (no unit divides by 2, 3 or 4): every shard pads.
  const config::Config cfg = config::load_config_string(
      "data:\n  source: synthetic\n", "test",
      {"model.preset=tiny", "model.num_layers=2", "model.vocab_size=97", "model.hidden_size=36", "model.num_heads=3",
       "model.num_kv_heads=1", "model.intermediate_size=50", "train.seq_len=16", "train.micro_batch_size=2",
       "train.max_steps=4", "train.log_every=100", "fsdp.sharding_strategy=FULL_SHARD", "checkpoint.resume=none",
       "logging.profile_wait=1", "logging.profile_warmup=1", "logging.profile_active=2",
       "logging.memory_snapshot_step=3", "run.dir=" + dir});
  train::Trainer trainer(cfg, groups);
  ASSERT_EQ(trainer.run(), train::kExitOk);
  world.barrier();
  const int rank = world.rank();
  const nlohmann::json t = read_json(fs::path(dir) / "traces" / fmt::format("rank_{}.trace.json", rank));
  test::check_trace_well_formed(t);
  EXPECT_EQ(t["otherData"]["steps"], nlohmann::json({3, 4}));
  std::vector<nlohmann::json> metrics;  // rank 0's
  {
    std::ifstream f(fs::path(dir) / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) metrics.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(metrics.size(), 4u);

  const auto main = test::spans_by_track(t).at("main (training loop)");
  const int units = trainer.engine().num_units();
  double loss_allreduce_end = 0;
  for (const auto& step : main) {
    if (step["name"] != "step") continue;
    const int64_t s = step["args"]["step"];
    const double begin = step["ts"], end = test::span_end(step);
    if (rank == 0) {
      const double logged = metrics[size_t(s - 1)]["step_ms"];
      EXPECT_NEAR(step["dur"].get<double>() / 1e3, logged, 0.05 * logged) << "step " << s;
    }
    std::map<std::string, int> count;
    uint64_t bytes = 0;
    uint64_t sent_before = 0, sent_after = 0;  // the "bytes sent" counter (0 when the window starts)
    for (const auto& e : t["traceEvents"]) {
      if (e["ph"] == "C" && e["name"] == "bytes sent") {
        if (e["ts"].get<double>() < begin) sent_before = e["args"]["bytes"];
        if (e["ts"].get<double>() <= end) sent_after = e["args"]["bytes"];
      }
      if (e["ph"] == "M" || e["ts"].get<double>() < begin || e["ts"].get<double>() > end) continue;
      if (e["ph"] == "b" && e["cat"] == "collective") {
        ++count[e["name"]];
        bytes += e["args"]["bytes"].get<uint64_t>();
        EXPECT_TRUE(e["args"]["group"] == "shard" || e["args"]["group"] == "world") << e.dump();
      }
    }
    // FULL_SHARD: every unit gathered for forward and again for backward but the last (kept
    // for its backward), every gradient reduce-scattered, the gradient norm and the
    // step's votes all-reduced.
    EXPECT_EQ(count["all_gather"], 2 * units - 1) << "step " << s;
    EXPECT_EQ(count["reduce_scatter"], units) << "step " << s;
    EXPECT_EQ(count["all_reduce"], 2) << "step " << s;
    // The shards pad to equal sizes, so every rank sends what rank 0 logged.
    EXPECT_EQ(bytes, metrics[size_t(s - 1)]["comm_bytes"].get<uint64_t>()) << "step " << s;
    EXPECT_EQ(sent_after - sent_before, bytes) << "the bytes-sent counter over step " << s;
    if (s == 3) {
      for (const auto& e : main)
        if (e["name"] == "loss all-reduce" && e["ts"].get<double>() >= begin && e["ts"].get<double>() <= end)
          loss_allreduce_end = test::span_end(e);
    }
  }
  // One time axis: every rank leaves step 3's loss all-reduce at about the same moment.
  ASSERT_GT(loss_allreduce_end, 0);
  const Tensor mine = Tensor::zeros({1}, DType::F64), all = Tensor::zeros({world.size()}, DType::F64);
  mine.data<double>()[0] = loss_allreduce_end;
  world.wait(world.all_gather(mine, all));
  double lo = all.data<double>()[0], hi = lo;
  for (int r = 1; r < world.size(); ++r) {
    lo = std::min(lo, all.data<double>()[r]);
    hi = std::max(hi, all.data<double>()[r]);
  }
  EXPECT_LT(hi - lo, 50e3) << "microseconds between the ranks' ends of one all-reduce (oversubscribed cores)";

  // The memory snapshot of step 3 on this rank.
  const nlohmann::json snap = read_json(fs::path(dir) / "traces" / fmt::format("rank_{}.memory_step_3.json", rank));
  const nlohmann::json& a = snap["allocators"][0];
  uint64_t sum = 0;
  std::map<std::string, uint64_t> by_name;
  for (const auto& c : a["categories"]) {
    sum += c["bytes"].get<uint64_t>();
    by_name[c["name"]] = c["bytes"];
  }
  EXPECT_EQ(sum, a["bytes_in_use"].get<uint64_t>());
  EXPECT_GT(by_name["gathered parameters"], 0u);
  EXPECT_EQ(by_name["sharded state"], trainer.engine().persistent_bytes() / 4 * 3);

  world.barrier();
  if (rank == 0) {
    const fs::path traces = fs::path(dir) / "traces";
    const obs::MergedTraces m = obs::merge_traces(traces.string(), (traces / "trace.json").string());
    EXPECT_EQ(int(m.ranks.size()), world.size());
    EXPECT_EQ(m.world_size, world.size());
    std::map<int, int> names;
    const nlohmann::json merged = read_json(traces / "trace.json");
    for (const auto& e : merged["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "process_name") ++names[e["pid"].get<int>()];
    EXPECT_EQ(int(names.size()), world.size()) << "a process per rank";
  }
  world.barrier();
}

}  // namespace
}  // namespace fsdp
