// The single-rank communicator (a process started without a launcher): collectives are
// copies or no-ops, nothing is counted as sent, argument errors read as on MPI, and
// MPI is never initialised (this binary must never do so).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "fsdp/dist/communicator.h"
#include "test_util.h"

namespace fsdp::dist {
namespace {

using test::expect_error;

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

Tensor iota(DType dtype, int64_t n, double start) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.set_flat(i, start + double(i));
  return t;
}

TEST(LocalCommunicator, GroupsAreThisRankOnly) {
  ProcessGroups g = dist::local_process_groups();
  EXPECT_EQ(g.world_info.launcher, "none");
  EXPECT_EQ(g.world_info.rank, 0);
  EXPECT_EQ(g.world_info.size, 1);
  EXPECT_EQ(g.world_info.num_nodes, 1);
  EXPECT_FALSE(g.world_info.hostname.empty());
  for (const auto& [c, name] : {std::pair{g.world.get(), "world"}, std::pair{g.shard.get(), "shard"},
                                std::pair{g.replicate.get(), "replicate"}}) {
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->name(), name);
  }
  EXPECT_FALSE(mpi_initialized());
}

TEST(LocalCommunicator, AllToAllVCopiesItsOwnRunAndChecksTheCounts) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.world;
  const Tensor send = iota(DType::BF16, 6, 3), recv = Tensor::zeros({6}, DType::BF16);
  c.reset_stats();
  c.wait(c.all_to_all_v(send, {6}, recv, {6}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(recv.get_flat(i), 3.0 + double(i));
  EXPECT_EQ(c.stats().bytes_sent, 0u);
  EXPECT_EQ(c.stats().calls, 1u);
  c.wait(c.all_to_all_v(Tensor::zeros({0}, DType::F32), {0}, Tensor::zeros({0}, DType::F32), {0}));
  test::expect_error([&] { c.all_to_all_v(send, {6}, Tensor::zeros({5}, DType::BF16), {5}); },
                     {"all_to_all_v on group 'world'", "sends 6 elements to itself but expects 5"});
  test::expect_error([&] { c.all_to_all_v(send, {3, 3}, recv, {6}); }, {"send_counts has 2 entries"});
}

TEST(LocalCommunicator, AllGatherAndReduceScatterCopy) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.world;
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor shard = iota(dtype, 7, 1), full = Tensor::zeros({7}, dtype);
    c.wait(c.all_gather(shard, full));
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(full.get_flat(i), 1.0 + double(i));
    const Tensor src = iota(dtype, 5, 10), dst = Tensor::zeros({5}, dtype);
    c.wait(c.reduce_scatter(src, dst));
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(dst.get_flat(i), 10.0 + double(i));
    // In place: the shard is the full buffer itself.
    c.wait(c.all_gather(full, full));
    EXPECT_EQ(full.get_flat(6), 7.0);
    // Empty shards are fine.
    c.wait(c.all_gather(Tensor::zeros({0}, dtype), Tensor::zeros({0}, dtype)));
  }
}

TEST(LocalCommunicator, AllReduceAndBroadcastLeaveTheTensor) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.world;
  const Tensor x = iota(DType::BF16, 9, -4);
  c.wait(c.all_reduce(x));
  c.wait(c.broadcast(x, 0));
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(x.get_flat(i), -4.0 + double(i));
  c.barrier();
}

TEST(LocalCommunicator, CountsCallsButNoBytes) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.shard;
  const Tensor a = iota(DType::F32, 100, 0), b = Tensor::zeros({100}, DType::F32);
  c.wait(c.all_gather(a, b));
  c.wait(c.reduce_scatter(b, a));
  c.wait(c.all_reduce(a));
  c.wait(c.broadcast(a, 0));
  EXPECT_EQ(c.stats().bytes_sent, 0u);
  EXPECT_EQ(c.stats().calls, 4u);
  c.reset_stats();
  EXPECT_EQ(c.stats().calls, 0u);
}

TEST(LocalCommunicator, RequestsCompleteAtOnce) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.world;
  const Request r = c.all_reduce(Tensor::zeros({2}, DType::F32));
  EXPECT_EQ(r.id, -1);
  c.wait(r);
  c.wait(r);  // nothing to wait for, however often
  expect_error([&] { c.wait(Request{3}); }, {"request 3 is not pending", "group 'world'"});
}

TEST(LocalCommunicator, BadArgumentsThrowTheSameErrorsAsMpi) {
  ProcessGroups g = dist::local_process_groups();
  Communicator& c = *g.shard;
  const Tensor t = Tensor::zeros({4}, DType::F32);
  expect_error([&] { c.all_gather(t, Tensor::zeros({5}, DType::F32)); },
               {"all_gather on group 'shard' (rank 0 of 1)", "full has 5 elements", "= 4 * 1 = 4"});
  expect_error([&] { c.reduce_scatter(Tensor::zeros({4}, DType::F64), t); }, {"reduce_scatter", "same dtype"});
  expect_error([&] { c.all_reduce(Tensor::zeros({2, 3}, DType::F32).transpose(0, 1)); }, {"must be contiguous"});
  expect_error([&] { c.all_reduce(Tensor::zeros({2}, DType::I64)); }, {"float32, float64, bfloat16, float16 or uint8"});
  expect_error([&] { c.broadcast(t, 1); }, {"root 1 is not a rank of the group (0 .. 0)"});
  const Tensor full = Tensor::zeros({8}, DType::F32);
  expect_error([&] { c.reduce_scatter(full, full); }, {"reduce_scatter", "overlap"});
}

TEST(LocalCommunicator, SplitSharesTheWorldAndChecksTheSize) {
  ProcessGroups base = dist::local_process_groups();
  for (int s : {0, 1, -1}) {
    ProcessGroups g = dist::split_process_groups(base, s);
    EXPECT_EQ(g.world.get(), base.world.get());
    EXPECT_EQ(g.shard->size(), 1);
    EXPECT_EQ(g.replicate->size(), 1);
  }
  expect_error([&] { dist::split_process_groups(base, 2); },
               {"shard_group_size 2 does not divide the world size 1 (rank 0)"});
}

// init_process_groups itself, in a process no launcher started.
TEST(LocalCommunicator, InitWithoutLauncherNeverTouchesMpi) {
  if (launched_by_mpi()) GTEST_SKIP() << "this test binary was started by an MPI launcher";
  ProcessGroups g = dist::init_process_groups(0);
  EXPECT_EQ(g.world_info.launcher, "none");
  EXPECT_EQ(g.world->size(), 1);
  g.world->wait(g.world->all_reduce(Tensor::zeros({3}, DType::F32)));
  EXPECT_FALSE(mpi_initialized());
  expect_error([] { dist::init_process_groups(4); }, {"shard_group_size 4", "world size 1", "(rank 0)"});
  EXPECT_FALSE(mpi_initialized());
  dist::shutdown_distributed();  // nothing to finalise
}

// srun without an MPI plugin starts N copies: they meet through the TCP store (never N rank
// 0s), which needs to know where rank 0 runs; without MPI either way.
// tests/integration/store_launch.sh runs such a launch.
TEST(LocalCommunicator, SrunWithoutMpiPluginMeetsThroughTheStoreNotAsRankZeros) {
  if (launched_by_mpi() || std::getenv("SLURM_JOB_ID") != nullptr) GTEST_SKIP() << "started by a launcher";
  setenv("SLURM_JOB_ID", "42", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_PROCID", "2", 1);
  expect_error([] { dist::init_process_groups(0); },
               {"srun started 4 tasks but none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or MASTER_ADDR says where "
                "rank 0 runs"});
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_PROCID");
  EXPECT_FALSE(mpi_initialized());
}

}  // namespace
}  // namespace fsdp::dist
