// The trace of a CUDA training step (train.device: cuda) under mpiexec with 1, 2 and 4
// ranks (cuda_fsdp_np*: the suite name starts with CudaTrainer): every op the op profiler
// counts is a span of the trace, on the track of the stream it ran on (timed by the op
// profiler's own CUDA events), the compute stream's track holds the model's kernels, and
// with more than one rank the communication stream's track holds the NCCL collectives,
// whose bytes with the world group's (MPI) add up to the step's comm_bytes. On the
// emulator the times are host times (tests/README.md); the structure is what is checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "../common/distributed_train_checks.h"
#include "../common/trace_checks.h"
#include "cuda_mpi_test_env.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/trainer.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

TEST(CudaTrainerTrace, StreamTracksHoldEveryOpTheProfilerCountsAndTheCollectives) {
  if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
  dist::ProcessGroups& groups = test::world_groups();
  dist::Communicator& world = *groups.world;
  const std::string dir = test::shared_scratch(world, "fsdp_cuda_trace");
  const config::Config cfg = config::load_config_string(
      "data:\n  source: synthetic\n", "test",
      {"model.preset=tiny", "model.num_layers=2", "model.vocab_size=97", "model.hidden_size=36", "model.num_heads=3",
       "model.num_kv_heads=1", "model.intermediate_size=50", "train.seq_len=16", "train.micro_batch_size=2",
       "train.max_steps=3", "train.device=cuda", "train.log_every=100", "checkpoint.resume=none",
       "fsdp.sharding_strategy=FULL_SHARD", "logging.profile_wait=1", "logging.profile_warmup=0",
       "logging.profile_active=1", "run.dir=" + dir});
  op_profile::reset();  // the op profiler runs only while the trace records: step 2
  train::Trainer trainer(cfg, groups);
  ASSERT_EQ(trainer.run(), train::kExitOk);
  world.barrier();
  const int rank = world.rank();
  const int device = trainer.device().index;
  std::ifstream f(fs::path(dir) / "traces" / fmt::format("rank_{}.trace.json", rank));
  const nlohmann::json t = nlohmann::json::parse(f);
  test::check_trace_well_formed(t);
  EXPECT_EQ(t["otherData"]["device"], fmt::format("cuda:{}", device));

  const auto tracks = test::spans_by_track(t);
  const std::string compute = fmt::format("cuda:{} compute stream", device);
  ASSERT_TRUE(tracks.count(compute)) << "no track " << compute;
  std::map<std::string, int64_t> traced;  // op spans by name, every track
  int64_t on_compute = 0;
  for (const auto& [track, spans] : tracks) {
    for (const auto& e : spans) {
      if (e["cat"] != "op") continue;
      ++traced[e["name"]];
      if (track == compute) ++on_compute;
    }
  }
  int64_t counted_total = 0;
  for (const op_profile::OpTime& r : op_profile::report()) {
    EXPECT_EQ(traced[r.op], r.calls) << r.op << ": the op profiler counted " << r.calls;
    counted_total += r.calls;
  }
  int64_t traced_total = 0;
  for (const auto& [name, n] : traced) traced_total += n;
  EXPECT_EQ(traced_total, counted_total);
  EXPECT_GT(on_compute, 20) << "the model's kernels run on the compute stream";
  for (const char* op : {"matmul", "attention_forward", "attention_backward", "rmsnorm_forward", "adamw"})
    EXPECT_GT(traced[op], 0) << op;

  std::vector<nlohmann::json> metrics;
  {
    std::ifstream m(fs::path(dir) / "metrics.jsonl");
    for (std::string line; std::getline(m, line);) metrics.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(metrics.size(), 3u);
  uint64_t nccl_bytes = 0, mpi_bytes = 0;
  int nccl_gathers = 0;
  const std::string comm = fmt::format("cuda:{} communication (group 'shard') stream", device);
  if (tracks.count(comm)) {
    for (const auto& e : tracks.at(comm)) {
      ASSERT_EQ(e["cat"], "collective") << e.dump();
      nccl_bytes += e["args"]["bytes"].get<uint64_t>();
      nccl_gathers += e["name"] == "all_gather";
    }
  }
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "b" && e["cat"] == "collective") mpi_bytes += e["args"]["bytes"].get<uint64_t>();
  if (world.size() > 1) {
    ASSERT_TRUE(tracks.count(comm)) << "no track " << comm;
    EXPECT_EQ(nccl_gathers, 2 * trainer.engine().num_units() - 1);
    // FULL_SHARD pads shards to equal sizes: every rank sends what rank 0 logged for step 2.
    EXPECT_EQ(nccl_bytes + mpi_bytes, metrics[1]["comm_bytes"].get<uint64_t>());
  }
  world.barrier();
}

}  // namespace
}  // namespace fsdp
