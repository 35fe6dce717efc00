// The MPI communicator under mpiexec with 1, 2 and 4 ranks: every collective against
// the value each rank computes for itself from everyone's rank-dependent input (float32,
// float64, bfloat16; odd and zero sizes), requests outstanding together and waited in
// reverse, the byte formulas of communicator.h, the shard / replicate groups, and the
// errors bad arguments and bad waits give.
//
// Inputs are small integers (|x| <= 256 in every partial sum) wherever a result is checked
// exactly: those are exact in bfloat16 too, so any summation order MPI picks gives the
// same bits. Random inputs are checked separately with a tolerance.
//
// Every rank runs every test in the same order with the same arguments, so collectives
// match across ranks; argument errors are raised before any communication, on all
// ranks alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "../../src/dist/detail.h"  // detail::mpi_fail, the MPI error layer
#include "../cpu/test_util.h"
#include "fsdp/dist/communicator.h"
#include "mpi_test_env.h"
#include "../common/count_allocations.h"

namespace fsdp::test {
}

namespace fsdp::dist {
namespace {

using test::expect_error;
using test::expect_error_from;
using test::filled;

ProcessGroups& groups() { return test::world_groups(); }
Communicator& world() { return *groups().world; }

// Rank r's element i: integers below 256, exact in bf16, and sums over up to 128 ranks
// (|sum| <= 2 * ranks) stay exact whatever the order of addition.
double gather_value(int r, int64_t i) { return double((r * 37 + i * 5) % 251); }
double sum_value(int r, int64_t i) { return double((r + i) % 5 - 2); }

void expect_values(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  int shown = 0;
  for (int64_t i = 0; i < t.numel() && shown < 5; ++i) {
    if (t.get_flat(i) != want(i)) {
      ADD_FAILURE() << what << " element " << i << ": got " << t.get_flat(i) << ", want " << want(i);
      ++shown;
    }
  }
}

// ---- launch and world ----

TEST(MpiCommunicator, WorldInfoDescribesTheLaunch) {
  const dist::WorldInfo& w = groups().world_info;
  EXPECT_EQ(w.launcher, "mpirun");
  EXPECT_EQ(w.rank, world().rank());
  EXPECT_EQ(w.size, world().size());
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) {
    EXPECT_EQ(w.rank, std::atoi(r));
  }
  if (const char* s = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(w.size, std::atoi(s));
  }
  // Every rank of this test runs on one machine.
  EXPECT_EQ(w.num_nodes, 1);
  EXPECT_EQ(w.node_index, 0);
  EXPECT_EQ(w.local_rank, w.rank);
  EXPECT_EQ(w.local_size, w.size);
  EXPECT_FALSE(w.hostname.empty());
  EXPECT_EQ(world().name(), "world");
  EXPECT_EQ(groups().shard->name(), "shard");
  EXPECT_EQ(groups().replicate->name(), "replicate");
  // init_process_groups(0): the shard group is the world, the replicate group this rank.
  EXPECT_EQ(groups().shard->size(), w.size);
  EXPECT_EQ(groups().replicate->size(), 1);
}

// ---- each collective against the locally computed expectation ----

struct Case {
  DType dtype;
  int64_t n;  // elements per shard
};

void PrintTo(const Case& c, std::ostream* os) { *os << dtype_name(c.dtype) << "[" << c.n << "]"; }

class Collectives : public testing::TestWithParam<Case> {};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_n" + std::to_string(info.param.n);
}

// Named so that --gtest_filter='MpiCommunicator*' selects every test of this file.
INSTANTIATE_TEST_SUITE_P(MpiCommunicator, Collectives,
                         testing::Values(Case{DType::F32, 0}, Case{DType::F32, 1}, Case{DType::F32, 7},
                                         Case{DType::F32, 1001}, Case{DType::F64, 0}, Case{DType::F64, 13},
                                         Case{DType::BF16, 0}, Case{DType::BF16, 3}, Case{DType::BF16, 1001},
                                         Case{DType::F16, 5}, Case{DType::F16, 1001}),
                         case_name);

TEST_P(Collectives, AllGatherConcatenatesShardsInRankOrder) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const Tensor shard = filled(dtype, n, [&](int64_t i) { return gather_value(r, i); });
  const Tensor full = Tensor::zeros({n * p}, dtype);
  c.wait(c.all_gather(shard, full));
  expect_values(full, [&](int64_t j) { return gather_value(int(j / n), j % n); }, "full");
}

TEST_P(Collectives, AllGatherInPlaceFromThisRanksSlot) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const Tensor full = Tensor::zeros({n * p}, dtype);
  const Tensor shard = full.narrow(0, r * n, n);
  for (int64_t i = 0; i < n; ++i) shard.set_flat(i, gather_value(r, i));
  c.wait(c.all_gather(shard, full));
  expect_values(full, [&](int64_t j) { return gather_value(int(j / n), j % n); }, "full");
}

TEST_P(Collectives, ReduceScatterSumsThisRanksSlot) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const Tensor full = filled(dtype, n * p, [&](int64_t j) { return sum_value(r, j); });
  const Tensor shard = Tensor::zeros({n}, dtype);
  c.wait(c.reduce_scatter(full, shard));
  expect_values(shard, [&](int64_t i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += sum_value(q, r * n + i);
    return s;
  }, "shard");
}

TEST_P(Collectives, AllReduceSumsInPlace) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const Tensor x = filled(dtype, n, [&](int64_t i) { return sum_value(r, i); });
  c.wait(c.all_reduce(x));
  expect_values(x, [&](int64_t i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += sum_value(q, i);
    return s;
  }, "x");
}

TEST_P(Collectives, BroadcastCopiesTheRootsTensor) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  for (int root = 0; root < c.size(); ++root) {
    const Tensor x = filled(dtype, n, [&](int64_t i) { return gather_value(c.rank(), i); });
    c.wait(c.broadcast(x, root));
    expect_values(x, [&](int64_t i) { return gather_value(root, i); }, "x from root " + std::to_string(root));
  }
}

// Rank r sends (r + 2 j + n) % 4 elements to rank j (zero-length runs included), element k
// of that run being a2a_value(r, j, k): every rank can say what it must receive from whom.
int64_t a2a_count(int from, int to, int64_t n) { return (from + 2 * to + n) % 4 + (n > 100 ? n : 0); }
double a2a_value(int from, int to, int64_t k) { return double((from * 31 + to * 7 + k) % 241); }

TEST_P(Collectives, AllToAllVDeliversEachRunToItsRank) {
  const auto [dtype, n] = GetParam();
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  std::vector<int64_t> send_counts(static_cast<size_t>(p)), recv_counts(static_cast<size_t>(p));
  int64_t send_total = 0, recv_total = 0;
  for (int j = 0; j < p; ++j) {
    send_counts[size_t(j)] = a2a_count(r, j, n);
    recv_counts[size_t(j)] = a2a_count(j, r, n);
    send_total += send_counts[size_t(j)];
    recv_total += recv_counts[size_t(j)];
  }
  std::vector<double> send_values, want;
  for (int j = 0; j < p; ++j)
    for (int64_t k = 0; k < send_counts[size_t(j)]; ++k) send_values.push_back(a2a_value(r, j, k));
  for (int i = 0; i < p; ++i)
    for (int64_t k = 0; k < recv_counts[size_t(i)]; ++k) want.push_back(a2a_value(i, r, k));
  const Tensor send = filled(dtype, send_total, [&](int64_t i) { return send_values[size_t(i)]; });
  const Tensor recv = filled(dtype, recv_total, [](int64_t) { return -1.0; });
  c.reset_stats();
  c.wait(c.all_to_all_v(send, send_counts, recv, recv_counts));
  expect_values(recv, [&](int64_t i) { return want[size_t(i)]; }, "recv");
  EXPECT_EQ(c.stats().calls, 1u);
  EXPECT_EQ(c.stats().bytes_sent, uint64_t(send_total - send_counts[size_t(r)]) * dtype_size(dtype))
      << "the runs to the other ranks, not this rank's own";
}

TEST(MpiCommunicator, AllToAllVOnEveryGroupOfTheMesh) {
  // The tensor, shard and replicate groups of the test's world run their exchanges at once,
  // each with its own counts: the group ranks, not the world ranks, index the runs.
  for (Communicator* g : {groups().shard.get(), groups().replicate.get(), groups().tensor.get()}) {
    const int p = g->size(), r = g->rank();
    std::vector<int64_t> counts(static_cast<size_t>(p));
    for (int j = 0; j < p; ++j) counts[size_t(j)] = 2;
    const Tensor send = filled(DType::F32, 2 * p, [&](int64_t i) { return double(r * 100 + i); });
    const Tensor recv = Tensor::zeros({2 * p}, DType::F32);
    g->wait(g->all_to_all_v(send, counts, recv, counts));
    expect_values(recv, [&](int64_t i) { return double((i / 2) * 100 + r * 2 + i % 2); }, g->name());
  }
}

// Random values: float32 sums are close to the exact sum and bit-identical on every rank
// (replicas must not drift apart); bf16 sums round once per addition.
TEST(MpiCommunicator, AllReduceOfRandomValuesIsCloseAndIdenticalOnEveryRank) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const int64_t n = 4099;
  auto value = [](int q, int64_t i) {
    std::mt19937_64 rng(uint64_t(q) * 1000003u + uint64_t(i));
    return std::uniform_real_distribution<double>(-1, 1)(rng);
  };
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = filled(dtype, n, [&](int64_t i) { return value(r, i); });
    c.wait(c.all_reduce(x));
    // Per addition: float32 rounds at 2^-24 relative, bf16 at 2^-9, fp16 at 2^-11 (of a
    // partial sum <= p).
    const double eps = dtype == DType::F32    ? 1e-6
                       : dtype == DType::BF16 ? p * 0.5 * std::ldexp(1.0, -8)
                                              : p * 0.5 * std::ldexp(1.0, -10);
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int q = 0; q < p; ++q) exact += filled(dtype, 1, [&](int64_t) { return value(q, i); }).get_flat(0);
      ASSERT_NEAR(x.get_flat(i), exact, eps * (p + 1)) << "element " << i;
    }
    const Tensor all = Tensor::zeros({n * p}, dtype);
    c.wait(c.all_gather(x, all));
    const auto* bytes = static_cast<const unsigned char*>(all.data_ptr());
    for (int q = 1; q < p; ++q)
      EXPECT_EQ(std::memcmp(bytes, bytes + q * x.nbytes(), x.nbytes()), 0) << "rank " << q << " summed differently";
  }
}

// ---- requests ----

TEST(MpiCommunicator, OutstandingRequestsCompleteWhenWaitedInReverse) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const int64_t n = 37;
  std::vector<Tensor> shards, fulls;
  std::vector<Request> reqs;
  for (int k = 0; k < 3; ++k) {
    shards.push_back(filled(DType::F32, n, [&](int64_t i) { return gather_value(r, i) + k; }));
    fulls.push_back(Tensor::zeros({n * p}, DType::F32));
    reqs.push_back(c.all_gather(shards.back(), fulls.back()));
  }
  const Tensor rs_in = filled(DType::BF16, n * p, [&](int64_t j) { return sum_value(r, j); });
  const Tensor rs_out = Tensor::zeros({n}, DType::BF16);
  reqs.push_back(c.reduce_scatter(rs_in, rs_out));
  const Tensor ar = filled(DType::F64, n, [&](int64_t i) { return sum_value(r, i); });
  reqs.push_back(c.all_reduce(ar));
  const Tensor bc = filled(DType::F32, n, [&](int64_t i) { return gather_value(r, i); });
  reqs.push_back(c.broadcast(bc, p - 1));
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) c.wait(*it);

  for (int k = 0; k < 3; ++k)
    expect_values(fulls[size_t(k)], [&](int64_t j) { return gather_value(int(j / n), j % n) + k; }, "all_gather");
  auto sum_over_ranks = [&](int64_t i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += sum_value(q, i);
    return s;
  };
  expect_values(rs_out, [&](int64_t i) { return sum_over_ranks(r * n + i); }, "reduce_scatter");
  expect_values(ar, sum_over_ranks, "all_reduce");
  expect_values(bc, [&](int64_t i) { return gather_value(p - 1, i); }, "broadcast");
}

TEST(MpiCommunicator, WaitOnUnknownOrFinishedRequestThrows) {
  Communicator& c = world();
  c.wait(Request{});  // -1: complete already, nothing to wait for
  expect_error([&] { c.wait(Request{12345}); }, {"request 12345 is not pending", "group 'world'"});
  expect_error([&] { c.wait(Request{-7}); }, {"request -7 is not pending"});
  const Tensor x = Tensor::zeros({5}, DType::F32);
  const Request r = c.all_reduce(x);
  c.wait(r);
  expect_error([&] { c.wait(r); }, {"is not pending", "already waited"});
  // A request of another group is unknown here, even where the slot numbers coincide.
  const Request other = groups().replicate->all_reduce(x);
  expect_error([&] { c.wait(other); }, {"is not pending"});
  groups().replicate->wait(other);
}

TEST(MpiCommunicator, TooManyPendingRequestsIsAClearError) {
  Communicator& c = world();
  const Tensor x = Tensor::zeros({1}, DType::F32);
  std::vector<Request> reqs;
  for (int k = 0; k < 64; ++k) reqs.push_back(c.all_reduce(x));
  expect_error([&] { c.all_reduce(x); }, {"64 collectives are already pending", "wait()"});
  for (const Request& r : reqs) c.wait(r);
  c.wait(c.all_reduce(x));  // the table is usable again
}

// After warm-up, issuing and waiting collectives allocates nothing on the C++ heap (the
// trainer's steps hold themselves to this).
TEST(MpiCommunicator, SteadyStateCollectivesDoNotAllocate) {
  Communicator& c = world();
  const int p = c.size();
  const Tensor shard = Tensor::zeros({333}, DType::BF16), full = Tensor::zeros({333 * p}, DType::BF16);
  const Tensor x = Tensor::zeros({100}, DType::F32);
  auto step = [&] {
    const Request a = c.all_gather(shard, full);
    const Request b = c.reduce_scatter(full, shard);
    const Request d = c.all_reduce(x);
    const Request e = c.broadcast(x, 0);
    c.wait(d);
    c.wait(a);
    c.wait(e);
    c.wait(b);
  };
  step();
  const uint64_t before = test::heap_allocations();
  for (int k = 0; k < 20; ++k) step();
  EXPECT_EQ(test::heap_allocations() - before, 0u) << "operator new called by steady-state collectives";
}

// ---- byte accounting ----

TEST(MpiCommunicator, BytesSentFollowTheRingFormulas) {
  Communicator& c = world();
  const auto p = uint64_t(c.size());
  const int64_t n = 10;
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const uint64_t es = dtype_size(dtype), shard_bytes = uint64_t(n) * es;
    const Tensor shard = Tensor::zeros({n}, dtype), full = Tensor::zeros({n * int64_t(p)}, dtype);
    c.reset_stats();
    c.wait(c.all_gather(shard, full));
    EXPECT_EQ(c.stats().bytes_sent, (p - 1) * shard_bytes);
    EXPECT_EQ(c.stats().calls, 1u);
    c.reset_stats();
    c.wait(c.reduce_scatter(full, shard));
    EXPECT_EQ(c.stats().bytes_sent, (p - 1) * shard_bytes);
    c.reset_stats();
    c.wait(c.all_reduce(full));
    EXPECT_EQ(c.stats().bytes_sent, 2 * (p - 1) * (p * shard_bytes) / p);
    for (int root = 0; root < int(p); ++root) {
      c.reset_stats();
      c.wait(c.broadcast(shard, root));
      const bool last_in_ring = (c.rank() - root + int(p)) % int(p) == int(p) - 1;
      EXPECT_EQ(c.stats().bytes_sent, p == 1 || last_in_ring ? 0 : shard_bytes) << "root " << root;
      // Over the whole group, size-1 ranks send the tensor once each.
      const Tensor total = Tensor::zeros({1}, DType::F64);
      total.set_flat(0, double(c.stats().bytes_sent));
      c.wait(c.all_reduce(total));
      EXPECT_EQ(uint64_t(total.get_flat(0)), (p - 1) * shard_bytes) << "root " << root;
    }
  }
  c.reset_stats();
  const Tensor x = Tensor::zeros({4}, DType::F32);
  for (int k = 0; k < 3; ++k) c.wait(c.all_reduce(x));
  EXPECT_EQ(c.stats().calls, 3u);
  EXPECT_GE(c.stats().wait_seconds, 0.0);
  EXPECT_LT(c.stats().wait_seconds, 60.0);
  c.reset_stats();
  EXPECT_EQ(c.stats().bytes_sent, 0u);
  EXPECT_EQ(c.stats().calls, 0u);
  EXPECT_EQ(c.stats().wait_seconds, 0.0);
}

// ---- process groups ----

// The world ranks of the members of `c`, in group rank order.
std::vector<int> members(Communicator& c) {
  const Tensor mine = Tensor::zeros({1}, DType::F64);
  mine.set_flat(0, world().rank());
  const Tensor all = Tensor::zeros({c.size()}, DType::F64);
  c.wait(c.all_gather(mine, all));
  std::vector<int> out;
  for (int64_t i = 0; i < all.numel(); ++i) out.push_back(int(all.get_flat(i)));
  return out;
}

TEST(MpiCommunicator, ShardAndReplicateGroupsForEveryDivisor) {
  const int p = world().size(), r = world().rank();
  for (int s = 1; s <= p; ++s) {
    if (p % s != 0) continue;
    SCOPED_TRACE("shard_group_size " + std::to_string(s));
    ProcessGroups g = dist::split_process_groups(groups(), s);
    EXPECT_EQ(g.world.get(), groups().world.get()) << "the world communicator is shared";
    ASSERT_EQ(g.shard->size(), s);
    ASSERT_EQ(g.replicate->size(), p / s);
    EXPECT_EQ(g.shard->rank(), r % s);
    EXPECT_EQ(g.replicate->rank(), r / s);
    std::vector<int> want_shard, want_replicate;
    for (int k = 0; k < s; ++k) want_shard.push_back(r / s * s + k);
    for (int k = 0; k < p / s; ++k) want_replicate.push_back(r % s + k * s);
    EXPECT_EQ(members(*g.shard), want_shard);
    EXPECT_EQ(members(*g.replicate), want_replicate);
  }
}

TEST(MpiCommunicator, HybridShardOnFourRanksWithGroupsOfTwo) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int r = world().rank();
  ProcessGroups g = dist::split_process_groups(groups(), 2);
  // shard groups {0,1} {2,3}; replicate groups {0,2} {1,3}
  EXPECT_EQ(members(*g.shard), (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
  EXPECT_EQ(members(*g.replicate), (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
  EXPECT_EQ(g.shard->rank(), r % 2);
  EXPECT_EQ(g.replicate->rank(), r / 2);
  // A reduce-scatter in the shard group then an all-reduce in the replicate group sums
  // over the whole world: HYBRID_SHARD's gradient path.
  const Tensor full = filled(DType::F32, 6, [&](int64_t j) { return sum_value(r, j); });
  const Tensor shard = Tensor::zeros({3}, DType::F32);
  g.shard->wait(g.shard->reduce_scatter(full, shard));
  g.replicate->wait(g.replicate->all_reduce(shard));
  expect_values(shard, [&](int64_t i) {
    double s = 0;
    for (int q = 0; q < 4; ++q) s += sum_value(q, (r % 2) * 3 + i);
    return s;
  }, "hybrid gradient shard");
}

TEST(MpiCommunicator, SpecialShardGroupSizes) {
  const int p = world().size(), r = world().rank();
  ProcessGroups whole = dist::split_process_groups(groups(), 0);
  EXPECT_EQ(whole.shard->size(), p);
  EXPECT_EQ(whole.replicate->size(), 1);
  ProcessGroups node = dist::split_process_groups(groups(), -1);  // one node here
  EXPECT_EQ(node.shard->size(), p);
  EXPECT_EQ(node.shard->rank(), r);
  EXPECT_EQ(node.replicate->size(), 1);
  ProcessGroups ddp = dist::split_process_groups(groups(), 1);
  EXPECT_EQ(ddp.shard->size(), 1);
  EXPECT_EQ(ddp.replicate->size(), p);
}

TEST(MpiCommunicator, ShardGroupSizeNotDividingTheWorldIsAnError) {
  const int p = world().size();
  const std::string rank = "(rank " + std::to_string(world().rank()) + ")";
  expect_error([&] { dist::split_process_groups(groups(), p + 1); },
               {"shard_group_size " + std::to_string(p + 1), "world size " + std::to_string(p), rank});
  expect_error([&] { dist::split_process_groups(groups(), -2); }, {"shard_group_size -2", rank});
  if (p == 4) expect_error([&] { dist::split_process_groups(groups(), 3); }, {"shard_group_size 3", "world size 4"});
}

TEST(MpiCommunicator, BarrierOnEveryGroup) {
  world().barrier();
  groups().shard->barrier();
  groups().replicate->barrier();
}

// ---- errors ----

// What a failing MPI call reports: the call, the group, the ranks, the host, MPI's text.
TEST(MpiCommunicator, MpiErrorsNameCallGroupRankAndHost) {
  const std::string where = "MPI_Iallgather(...) failed on group 'shard' (rank 1 of 2, world rank " +
                            std::to_string(world().rank()) + " on host " + groups().world_info.hostname + "): ";
  expect_error_from(
      [] { dist::detail::mpi_fail(MPI_ERR_TRUNCATE, "MPI_Iallgather(...)", "shard", 1, 2, __FILE__, __LINE__); },
      {where, "truncated"}, {"test_communicator.cpp:"});
}

// Bytes (a frozen unit's NF4 codes) are all-gathered as they are: every rank's shard, in
// rank order, bit for bit, and counted as (size - 1) * shard bytes like any all-gather.
TEST(MpiCommunicator, AllGathersBytesUnchanged) {
  Communicator& c = world();
  const int p = c.size();
  const int64_t n = 13;
  Tensor shard = Tensor::empty({n}, DType::U8), full = Tensor::zeros({n * p}, DType::U8);
  for (int64_t i = 0; i < n; ++i) shard.data<uint8_t>()[i] = uint8_t(251 * c.rank() + 7 * i + 1);
  const uint64_t before = c.stats().bytes_sent;
  c.wait(c.all_gather(shard, full));
  EXPECT_EQ(c.stats().bytes_sent - before, uint64_t(p - 1) * uint64_t(n));
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(full.data<uint8_t>()[r * n + i], uint8_t(251 * r + 7 * i + 1)) << r;
}

// ---- bad arguments: clear errors, raised before any communication ----

TEST(MpiCommunicator, BadArgumentsThrowClearErrors) {
  Communicator& c = world();
  const int p = c.size();
  const Tensor shard = Tensor::zeros({4}, DType::F32), full = Tensor::zeros({4 * p}, DType::F32);
  expect_error([&] { c.all_gather(shard, Tensor::zeros({4 * p + 1}, DType::F32)); },
               {"all_gather on group 'world'", "full has " + std::to_string(4 * p + 1) + " elements",
                "shard.numel() * group size"});
  expect_error([&] { c.reduce_scatter(full, Tensor::zeros({4}, DType::BF16)); }, {"reduce_scatter", "same dtype"});
  expect_error([&] { c.all_reduce(Tensor::zeros({3, 4}, DType::F32).transpose(0, 1)); }, {"must be contiguous"});
  expect_error([&] { c.all_reduce(Tensor::zeros({3}, DType::I32)); }, {"float32, float64, bfloat16, float16 or uint8"});
  expect_error([&] { c.all_reduce(Tensor::zeros({3}, DType::U8)); }, {"all_reduce", "uint8", "not summed"});
  expect_error([&] { c.reduce_scatter(Tensor::zeros({3 * p}, DType::U8), Tensor::zeros({3}, DType::U8)); },
               {"reduce_scatter", "not summed"});
  expect_error([&] { c.all_reduce(Tensor()); }, {"undefined tensor"});
  expect_error([&] { c.broadcast(shard, p); }, {"root " + std::to_string(p) + " is not a rank"});
  expect_error([&] { c.broadcast(shard, -1); }, {"root -1 is not a rank"});
  float device_dummy[4] = {};
  expect_error([&] { c.all_reduce(Tensor::from_blob(device_dummy, {4}, DType::F32, Device::cuda(0))); },
               {"MPI communicator serves tensors on cpu", "cuda:0"});
  // Overlap: reduce_scatter never, all_gather only from this rank's own slot.
  expect_error([&] { c.reduce_scatter(full, full.narrow(0, 0, 4)); }, {"overlap"});
  if (p > 1)
    expect_error([&] { c.all_gather(full.narrow(0, ((c.rank() + 1) % p) * 4, 4), full); },
                 {"overlap", "this rank's slot"});
  // Beyond MPI's int counts: refused before the data is ever touched.
  char byte = 0;
  expect_error([&] { c.all_reduce(Tensor::from_blob(&byte, {int64_t(1) << 31}, DType::BF16)); },
               {"int count limit"});
  // all_to_all_v: one count per rank, summing to each tensor's elements, never negative.
  const std::vector<int64_t> ones(size_t(p), 1);
  const Tensor run = Tensor::zeros({p}, DType::F32), runs = Tensor::zeros({p}, DType::F32);
  expect_error([&] { c.all_to_all_v(run, std::vector<int64_t>(size_t(p + 1), 0), runs, ones); },
               {"all_to_all_v on group 'world'", "send_counts has " + std::to_string(p + 1) + " entries"});
  expect_error([&] { c.all_to_all_v(run, ones, Tensor::zeros({p + 1}, DType::F32), ones); },
               {"recv_counts sum to " + std::to_string(p) + " elements"});
  if (p > 1) {
    std::vector<int64_t> negative = ones;
    negative[0] = -1;
    negative[size_t(p - 1)] += 2;
    expect_error([&] { c.all_to_all_v(run, negative, runs, ones); }, {"send_counts[0] is -1"});
  }
  std::vector<int64_t> more = ones;
  more[size_t(c.rank())] = 2;  // this rank's run to itself: 2 elements sent, 1 expected
  expect_error([&] { c.all_to_all_v(Tensor::zeros({p + 1}, DType::F32), more, runs, ones); },
               {"sends 2 elements to itself but expects 1"});
  expect_error([&] { c.all_to_all_v(run, ones, Tensor::zeros({p}, DType::BF16), ones); }, {"same dtype"});
  expect_error([&] { c.all_to_all_v(run, ones, run, ones); }, {"overlap"});
  // Nothing was sent and nothing is pending.
  c.wait(c.all_reduce(shard));
}

}  // namespace
}  // namespace fsdp::dist
