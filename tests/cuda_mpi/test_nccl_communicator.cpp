// The NCCL communicator on CUDA tensors against the MPI communicator on the same data, under
// mpiexec with 1, 2 and 4 ranks: all_gather (also in place), reduce_scatter, all_reduce and
// broadcast from every root; float32, float64, bfloat16 and float16; sizes 1, 7, 33, 1000, 4099 (odd,
// prime, not multiples of 4 or 32) and 0; over the world and over split shard / replicate
// groups; with the byte accounting of communicator.h equal call for call. all_to_all_v
// likewise, with uneven runs, zero-length runs, nothing but this rank's own run, nothing to
// anyone, and requests in flight. Then the errors: bad arguments, bad waits, a failing NCCL
// call (injected in the emulator) and a bad device.
//
// Tolerances: all_gather, broadcast and all_to_all_v move bytes, so they must be identical. Reductions
// of small integers (exact in every dtype, whatever the order of addition) must be
// identical too. Reductions of random values may add in another order than MPI's (NCCL's
// rings and trees; here MPI's blocking algorithms against the MPI communicator's
// non-blocking ones), so each result is held to the exact sum (in double) within the
// worst case of (ranks - 1) roundings: |got - exact| <= (ranks - 1) * u * sum |x_r|, with
// u = 2^-24 (float32), 2^-53 (float64), 2^-8 (bfloat16), 2^-10 (float16), the halves
// rounded after every addition.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../cpu/test_util.h"
#include "cuda_mpi_test_env.h"
#include "fsdp/core/cuda.h"
#include "fsdp/dist/nccl.h"

#if defined(FSDP_CUDA_EMULATION)
#include <nccl.h>  // the stand-in's fsdpEmuNcclInjectError
#endif

namespace fsdp::test {

namespace {

std::unique_ptr<dist::ProcessGroups> g_split;
std::unique_ptr<dist::NcclCommunicator> g_world, g_shard, g_replicate;

}  // namespace

bool cuda_usable() {
  const int n = cuda::device_count();
  if (cuda::is_emulated()) return n > 0;
  return n >= world_groups().world_info.local_size;
}

int rank_device() {
  const int n = cuda::device_count();
  return cuda::is_emulated() ? world_groups().world_info.rank % n : world_groups().world_info.local_rank;
}

dist::ProcessGroups& split_groups() {
  if (!g_split) {
    const int size = world_groups().world->size();
    g_split = std::make_unique<dist::ProcessGroups>(dist::split_process_groups(world_groups(), size % 2 == 0 ? 2 : 0));
  }
  return *g_split;
}

dist::NcclCommunicator& nccl_world() {
  if (!g_world) g_world = dist::make_nccl_communicator(*world_groups().world, rank_device());
  return *g_world;
}
dist::NcclCommunicator& nccl_shard() {
  if (!g_shard) g_shard = dist::make_nccl_communicator(*split_groups().shard, rank_device());
  return *g_shard;
}
dist::NcclCommunicator& nccl_replicate() {
  if (!g_replicate) g_replicate = dist::make_nccl_communicator(*split_groups().replicate, rank_device());
  return *g_replicate;
}

void release_nccl_communicators() {
  g_world.reset();
  g_shard.reset();
  g_replicate.reset();
  g_split.reset();
}

}  // namespace fsdp::test

namespace fsdp::dist {
namespace {

using test::expect_error;

constexpr int64_t kSizes[] = {1, 7, 33, 1000, 4099};
constexpr DType kTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};

class NcclCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
  }
  static Device gpu() { return Device::cuda(test::rank_device()); }
};

// Rank r's input for collective `what`: random in [-2, 2) or small integers, stored in dtype.
Tensor input(int r, int64_t n, DType dtype, uint64_t what, bool integers) {
  const uint64_t seed = what * 1000003 + uint64_t(r) * 7919 + uint64_t(n);
  if (!integers) return test::random_tensor({n}, DType::F64, seed, -2, 2).to(dtype);
  return test::filled(dtype, n, [&](int64_t i) { return double(int64_t((seed + uint64_t(i) * 13) % 7) - 3); });
}

Tensor on(const Tensor& t, Device d) { return cuda::to_device(t, d); }
Tensor host(const Tensor& t) { return cuda::to_device(t, Device::cpu()); }

double unit_roundoff(DType t) {
  switch (t) {
    case DType::F64: return std::ldexp(1.0, -53);
    case DType::F32: return std::ldexp(1.0, -24);
    case DType::F16: return std::ldexp(1.0, -10);
    default: return std::ldexp(1.0, -8);
  }
}

::testing::AssertionResult identical(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel())
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  if (!test::same_bits(got, want)) {
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.get_flat(i) != want.get_flat(i))
        return ::testing::AssertionFailure() << "element " << i << ": " << got.get_flat(i) << " vs " << want.get_flat(i);
    return ::testing::AssertionFailure() << "same values, different bits";
  }
  return ::testing::AssertionSuccess();
}

// got[i] against the exact sum over ranks of xs[r][offset + i], within the bound above.
::testing::AssertionResult near_exact_sum(const Tensor& got, const std::vector<Tensor>& xs, int64_t offset) {
  const double u = unit_roundoff(got.dtype());
  const double roundings = double(xs.size()) - 1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    long double exact = 0, magnitude = 0;  // 64-bit mantissa: exact enough against float64's 53
    for (const Tensor& x : xs) {
      exact += x.get_flat(offset + i);
      magnitude += std::fabs(x.get_flat(offset + i));
    }
    const long double bound = roundings * u * magnitude;
    if (std::fabs(got.get_flat(i) - exact) > bound)
      return ::testing::AssertionFailure() << "element " << i << ": " << got.get_flat(i) << ", exact sum "
                                           << double(exact) << ", bound " << double(bound);
  }
  return ::testing::AssertionSuccess();
}

// The accounting of one call on each communicator must be the same.
struct SameAccounting {
  Communicator& mpi;
  Communicator& nccl;
  CommStats mpi_before = mpi.stats(), nccl_before = nccl.stats();
  void check(const std::string& what) const {
    EXPECT_EQ(nccl.stats().bytes_sent - nccl_before.bytes_sent, mpi.stats().bytes_sent - mpi_before.bytes_sent) << what;
    EXPECT_EQ(nccl.stats().calls - nccl_before.calls, mpi.stats().calls - mpi_before.calls) << what;
  }
};

std::string label(const char* op, DType t, int64_t n) { return fmt::format("{} {} n={}", op, dtype_name(t), n); }

// ---- each collective against the MPI communicator ----

void check_all_gather(Communicator& mpi, Communicator& nccl, Device gpu, bool in_place) {
  const int size = mpi.size(), rank = mpi.rank();
  for (DType t : kTypes)
    for (int64_t n : kSizes) {
      const Tensor shard = input(rank, n, t, 1, false);
      const Tensor want = Tensor::empty({n * size}, t);
      SameAccounting acct{mpi, nccl};
      mpi.wait(mpi.all_gather(shard, want));
      Tensor full = on(Tensor::zeros({n * size}, t), gpu);
      if (in_place) {
        const Tensor slot = full.narrow(0, rank * n, n);
        cuda::copy(on(shard, gpu), slot);
        nccl.wait(nccl.all_gather(slot, full));
      } else {
        nccl.wait(nccl.all_gather(on(shard, gpu), full));
      }
      acct.check(label("all_gather", t, n));
      EXPECT_TRUE(identical(host(full), want)) << label("all_gather", t, n) << (in_place ? " in place" : "");
    }
}

void check_reduce_scatter(Communicator& mpi, Communicator& nccl, Device gpu, bool integers) {
  const int size = mpi.size(), rank = mpi.rank();
  for (DType t : kTypes)
    for (int64_t n : kSizes) {
      std::vector<Tensor> xs;
      for (int r = 0; r < size; ++r) xs.push_back(input(r, n * size, t, 2, integers));
      const Tensor want = Tensor::empty({n}, t);
      SameAccounting acct{mpi, nccl};
      mpi.wait(mpi.reduce_scatter(xs[size_t(rank)], want));
      const Tensor got = on(Tensor::zeros({n}, t), gpu);
      nccl.wait(nccl.reduce_scatter(on(xs[size_t(rank)], gpu), got));
      acct.check(label("reduce_scatter", t, n));
      const Tensor g = host(got);
      if (integers) {
        EXPECT_TRUE(identical(g, want)) << label("reduce_scatter", t, n);
      }
      EXPECT_TRUE(near_exact_sum(g, xs, rank * n)) << label("reduce_scatter", t, n) << " (NCCL)";
      EXPECT_TRUE(near_exact_sum(want, xs, rank * n)) << label("reduce_scatter", t, n) << " (MPI)";
    }
}

void check_all_reduce(Communicator& mpi, Communicator& nccl, Device gpu, bool integers) {
  const int size = mpi.size(), rank = mpi.rank();
  for (DType t : kTypes)
    for (int64_t n : kSizes) {
      std::vector<Tensor> xs;
      for (int r = 0; r < size; ++r) xs.push_back(input(r, n, t, 3, integers));
      const Tensor want = xs[size_t(rank)].clone();
      SameAccounting acct{mpi, nccl};
      mpi.wait(mpi.all_reduce(want));
      const Tensor x = on(xs[size_t(rank)], gpu);
      nccl.wait(nccl.all_reduce(x));
      acct.check(label("all_reduce", t, n));
      const Tensor g = host(x);
      if (integers) {
        EXPECT_TRUE(identical(g, want)) << label("all_reduce", t, n);
      }
      EXPECT_TRUE(near_exact_sum(g, xs, 0)) << label("all_reduce", t, n) << " (NCCL)";
    }
}

void check_broadcast(Communicator& mpi, Communicator& nccl, Device gpu) {
  const int rank = mpi.rank();
  for (int root = 0; root < mpi.size(); ++root)
    for (DType t : kTypes)
      for (int64_t n : kSizes) {
        const Tensor want = input(rank, n, t, 4, false);
        SameAccounting acct{mpi, nccl};
        mpi.wait(mpi.broadcast(want, root));
        const Tensor x = on(input(rank, n, t, 4, false), gpu);
        nccl.wait(nccl.broadcast(x, root));
        acct.check(label("broadcast", t, n) + " root " + std::to_string(root));
        EXPECT_TRUE(identical(host(x), want)) << label("broadcast", t, n) << " root " << root;
      }
}

// Rank `from`'s run to rank `to` in pattern k: its length, and its element i (small integers:
// exact in every dtype, and different for every sender, receiver and position).
//   0: uneven, 0 to 3 elements, zero-length runs between some ranks and not others;
//   1: long uneven runs (1000 to 1003 elements);
//   2: only each rank's run to itself;
//   3: nothing to anyone;
//   4: nothing to itself, one element to every other rank.
int64_t run_length(int from, int to, int pattern) {
  switch (pattern) {
    case 0: return (from + 2 * to) % 4;
    case 1: return 1000 + (3 * from + to) % 4;
    case 2: return from == to ? 5 : 0;
    case 3: return 0;
    default: return from == to ? 0 : 1;
  }
}
double run_value(int from, int to, int64_t i) { return double((from * 31 + to * 7 + i) % 241); }

// One all_to_all_v on the MPI and on the NCCL communicator of the same group: both receive
// every run where the contract puts it, and count the same calls and bytes.
void check_all_to_all_v(Communicator& mpi, Communicator& nccl, Device gpu) {
  const int size = mpi.size(), rank = mpi.rank();
  for (int pattern = 0; pattern < 5; ++pattern)
    for (DType t : kTypes) {
      std::vector<int64_t> send_counts, recv_counts;
      std::vector<double> send_values, want;
      for (int j = 0; j < size; ++j) {
        send_counts.push_back(run_length(rank, j, pattern));
        recv_counts.push_back(run_length(j, rank, pattern));
        for (int64_t i = 0; i < send_counts.back(); ++i) send_values.push_back(run_value(rank, j, i));
        for (int64_t i = 0; i < recv_counts.back(); ++i) want.push_back(run_value(j, rank, i));
      }
      const auto n_send = int64_t(send_values.size()), n_recv = int64_t(want.size());
      const Tensor send = test::filled(t, n_send, [&](int64_t i) { return send_values[size_t(i)]; });
      const Tensor expected = test::filled(t, n_recv, [&](int64_t i) { return want[size_t(i)]; });
      const std::string what =
          fmt::format("all_to_all_v pattern {} {} on group '{}'", pattern, dtype_name(t), nccl.name());
      SameAccounting acct{mpi, nccl};
      const Tensor by_mpi = test::filled(t, n_recv, [](int64_t) { return -1.0; });
      mpi.wait(mpi.all_to_all_v(send, send_counts, by_mpi, recv_counts));
      const Tensor got = on(test::filled(t, n_recv, [](int64_t) { return -1.0; }), gpu);
      const uint64_t bytes_before = nccl.stats().bytes_sent;
      nccl.wait(nccl.all_to_all_v(on(send, gpu), send_counts, got, recv_counts));
      acct.check(what);
      EXPECT_EQ(nccl.stats().bytes_sent - bytes_before,
                uint64_t(n_send - send_counts[size_t(rank)]) * uint64_t(dtype_size(t)))
          << what << ": the runs to the other ranks";
      EXPECT_TRUE(identical(host(got), expected)) << what;
      EXPECT_TRUE(identical(host(got), by_mpi)) << what << " (against MPI)";
    }
}

TEST_F(NcclCommunicator, DescribesItsGroupAndDevice) {
  Communicator& world = *test::world_groups().world;
  dist::NcclCommunicator& nccl = test::nccl_world();
  EXPECT_EQ(nccl.rank(), world.rank());
  EXPECT_EQ(nccl.size(), world.size());
  EXPECT_EQ(nccl.name(), "world");
  EXPECT_EQ(nccl.cuda_device(), test::rank_device());
  // Its own stream, not the compute stream: collectives can overlap compute.
  EXPECT_NE(nccl.comm_stream(), nullptr);
  EXPECT_NE(nccl.comm_stream(), cuda::current_stream(test::rank_device()));
}

TEST_F(NcclCommunicator, AllGatherMatchesMpi) {
  check_all_gather(*test::world_groups().world, test::nccl_world(), gpu(), false);
}
TEST_F(NcclCommunicator, AllGatherInPlaceMatchesMpi) {
  check_all_gather(*test::world_groups().world, test::nccl_world(), gpu(), true);
}
TEST_F(NcclCommunicator, ReduceScatterMatchesMpi) {
  check_reduce_scatter(*test::world_groups().world, test::nccl_world(), gpu(), true);
  check_reduce_scatter(*test::world_groups().world, test::nccl_world(), gpu(), false);
}
TEST_F(NcclCommunicator, AllReduceMatchesMpi) {
  check_all_reduce(*test::world_groups().world, test::nccl_world(), gpu(), true);
  check_all_reduce(*test::world_groups().world, test::nccl_world(), gpu(), false);
}
TEST_F(NcclCommunicator, BroadcastFromEveryRootMatchesMpi) {
  check_broadcast(*test::world_groups().world, test::nccl_world(), gpu());
}

TEST_F(NcclCommunicator, AllToAllVMatchesMpi) {
  check_all_to_all_v(*test::world_groups().world, test::nccl_world(), gpu());
}

// HYBRID_SHARD's groups: several NCCL cliques made at once, each over its own ranks.
TEST_F(NcclCommunicator, SplitGroupsMatchMpi) {
  ProcessGroups& g = test::split_groups();
  check_all_gather(*g.shard, test::nccl_shard(), gpu(), false);
  check_reduce_scatter(*g.shard, test::nccl_shard(), gpu(), true);
  check_all_reduce(*g.replicate, test::nccl_replicate(), gpu(), true);
  check_broadcast(*g.replicate, test::nccl_replicate(), gpu());
  check_all_to_all_v(*g.shard, test::nccl_shard(), gpu());  // runs indexed by group rank, not world rank
  check_all_to_all_v(*g.replicate, test::nccl_replicate(), gpu());
  EXPECT_EQ(test::nccl_shard().name(), "shard");
  EXPECT_EQ(test::nccl_replicate().size(), g.replicate->size());
}

// Zero elements: no NCCL call, a completed request, a call counted with no bytes: as MPI.
TEST_F(NcclCommunicator, ZeroElementsCompleteAtOnce) {
  Communicator& mpi = *test::world_groups().world;
  dist::NcclCommunicator& nccl = test::nccl_world();
  const Tensor e = Tensor::empty({0}, DType::F32, gpu());
  SameAccounting acct{mpi, nccl};
  EXPECT_EQ(nccl.all_gather(e, e).id, -1);
  EXPECT_EQ(nccl.reduce_scatter(e, e).id, -1);
  EXPECT_EQ(nccl.all_reduce(e).id, -1);
  EXPECT_EQ(nccl.broadcast(e, 0).id, -1);
  const Tensor h = Tensor::empty({0}, DType::F32);
  mpi.wait(mpi.all_gather(h, h));
  mpi.wait(mpi.reduce_scatter(h, h));
  mpi.wait(mpi.all_reduce(h));
  mpi.wait(mpi.broadcast(h, 0));
  acct.check("zero elements");
}

// Several requests in flight, completed in reverse order; then the work after wait() on
// the compute stream sees the results, and a barrier returns on every rank.
TEST_F(NcclCommunicator, RequestsInFlightCompleteInAnyOrder) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const int size = nccl.size(), rank = nccl.rank();
  std::vector<Tensor> xs;
  std::vector<Request> reqs;
  for (int k = 0; k < 8; ++k) {
    xs.push_back(on(test::filled(DType::F32, 33, [&](int64_t i) { return double(rank + k + i % 3); }), gpu()));
    reqs.push_back(nccl.all_reduce(xs.back()));
  }
  // Two all_to_all_v among them, each rank sending every rank (itself included) 2 elements.
  const std::vector<int64_t> twos(size_t(size), 2);
  std::vector<Tensor> runs;
  for (int k = 0; k < 2; ++k) {
    xs.push_back(
        on(test::filled(DType::F32, 2 * size, [&](int64_t i) { return double(100 * k + 10 * rank + i); }), gpu()));
    runs.push_back(on(Tensor::zeros({2 * size}, DType::F32), gpu()));
    reqs.push_back(nccl.all_to_all_v(xs.back(), twos, runs.back(), twos));
  }
  for (int k = 9; k >= 0; --k) nccl.wait(reqs[size_t(k)]);
  for (int k = 0; k < 8; ++k) {
    const Tensor g = host(xs[size_t(k)]);
    for (int64_t i = 0; i < 33; ++i)
      ASSERT_EQ(g.get_flat(i), double(size * (size - 1) / 2 + size * (k + i % 3))) << "request " << k << " element " << i;
  }
  for (int k = 0; k < 2; ++k) {
    const Tensor g = host(runs[size_t(k)]);
    for (int64_t i = 0; i < 2 * size; ++i)  // element i came from rank i / 2, its run to this rank
      ASSERT_EQ(g.get_flat(i), double(100 * k + 10 * (i / 2) + 2 * rank + i % 2))
          << "all_to_all_v " << k << " element " << i;
  }
  nccl.barrier();
}

// wait() joins the caller's current stream, whichever it is (Note [NCCL stream ordering]).
TEST_F(NcclCommunicator, WaitJoinsTheCurrentStream) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const int d = test::rank_device();
  void* compute = cuda::current_stream(d);
  const Tensor x = on(test::filled(DType::F64, 7, [](int64_t i) { return double(i); }), gpu());
  // Issued and waited while the comm stream itself is current: nothing to join, no error.
  cuda::set_current_stream(d, nccl.comm_stream());
  nccl.wait(nccl.all_reduce(x));
  cuda::set_current_stream(d, nullptr);
  EXPECT_EQ(cuda::current_stream(d), compute);
  nccl.wait(nccl.all_reduce(x));
  const Tensor g = host(x);
  const double s = double(nccl.size()) * nccl.size();
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(g.get_flat(i), s * double(i));
}

// ---- errors ----

TEST_F(NcclCommunicator, BadArgumentsGiveClearErrors) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const int size = nccl.size();
  const Tensor shard = cuda::to_device(Tensor::zeros({5}, DType::F32), gpu());
  const Tensor full = cuda::to_device(Tensor::zeros({5 * size}, DType::F32), gpu());
  // Host tensors belong to the MPI communicator.
  expect_error([&] { nccl.all_reduce(Tensor::zeros({5}, DType::F32)); },
               {"all_reduce on group 'world'", "the NCCL communicator serves tensors on cuda:", "on cpu"});
  // Another GPU of this process.
  if (cuda::device_count() > 1) {
    const int other = (test::rank_device() + 1) % cuda::device_count();
    expect_error([&] { nccl.broadcast(cuda::to_device(Tensor::zeros({5}, DType::F32), Device::cuda(other)), 0); },
                 {"broadcast on group 'world'", fmt::format("on cuda:{}", other)});
  }
  expect_error([&] { nccl.all_reduce(cuda::to_device(Tensor::zeros({5}, DType::I32), gpu())); },
               {"collectives take float32, float64, bfloat16, float16 or uint8"});
  expect_error([&] { nccl.all_gather(shard, cuda::to_device(Tensor::zeros({5 * size + 1}, DType::F32), gpu())); },
               {"all_gather on group 'world'", "must have shard.numel() * group size"});
  expect_error([&] { nccl.reduce_scatter(full, cuda::to_device(Tensor::zeros({5}, DType::BF16), gpu())); },
               {"reduce_scatter", "same dtype"});
  expect_error([&] { nccl.broadcast(shard, size); }, {"root", "is not a rank of the group"});
  expect_error([&] { nccl.all_reduce(cuda::to_device(Tensor::zeros({4, 6}, DType::F32), gpu()).transpose(0, 1)); },
               {"must be contiguous"});
  expect_error([&] { nccl.reduce_scatter(full, full.narrow(0, 0, 5)); }, {"overlap in memory"});

  // all_to_all_v: the counts' errors are the MPI communicator's, word for word (the shared
  // checks); nothing is sent, so the ranks stay in step.
  Communicator& mpi = *test::world_groups().world;
  const int rank = nccl.rank();
  const std::vector<int64_t> ones(size_t(size), 1);
  const auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // What each communicator says to the same counts, on tensors of n_send and n_recv elements.
  const auto errors = [&](const std::vector<int64_t>& send_counts, int64_t n_send,
                          const std::vector<int64_t>& recv_counts, int64_t n_recv) {
    const Tensor send = Tensor::zeros({n_send}, DType::F32), recv = Tensor::zeros({n_recv}, DType::F32);
    const std::string by_nccl =
        error_of([&] { nccl.all_to_all_v(on(send, gpu()), send_counts, on(recv, gpu()), recv_counts); });
    const std::string by_mpi = error_of([&] { mpi.all_to_all_v(send, send_counts, recv, recv_counts); });
    return std::make_pair(by_nccl, by_mpi);
  };
  std::vector<int64_t> negative = ones, more = ones;
  negative[0] = -1;
  negative[size_t(size - 1)] += 2;
  more[size_t(rank)] = 2;  // size + 1 elements in all, this rank's run 2 against recv's 1
  std::vector<std::tuple<std::vector<int64_t>, int64_t, const char*>> cases = {
      {std::vector<int64_t>(size_t(size + 1), 0), 0, "send_counts has"},
      {more, size + 1, "sends 2 elements to itself but expects 1"}};
  if (size > 1) cases.emplace_back(negative, size, "send_counts[0] is -1");
  for (const auto& [send_counts, n_send, part] : cases) {
    const auto [by_nccl, by_mpi] = errors(send_counts, n_send, ones, size);
    EXPECT_NE(by_nccl.find(part), std::string::npos) << by_nccl;
    EXPECT_NE(by_nccl.find("all_to_all_v on group 'world'"), std::string::npos) << by_nccl;
    EXPECT_EQ(by_nccl, by_mpi);
  }
  // This one names the tensor, whose device differs between the two: the words around it.
  const Tensor runs = on(Tensor::zeros({size}, DType::F32), gpu());
  expect_error([&] { nccl.all_to_all_v(runs, ones, on(Tensor::zeros({size + 1}, DType::F32), gpu()), ones); },
               {"all_to_all_v on group 'world'", fmt::format("recv_counts sum to {} elements", size)});
  const Tensor on_host = Tensor::zeros({size}, DType::F32), also_on_host = Tensor::zeros({size}, DType::F32);
  expect_error([&] { nccl.all_to_all_v(on_host, ones, also_on_host, ones); },
               {"all_to_all_v on group 'world'", "the NCCL communicator serves tensors on cuda:", "on cpu"});
  expect_error([&] { nccl.all_to_all_v(runs, ones, on(Tensor::zeros({size}, DType::BF16), gpu()), ones); },
               {"all_to_all_v", "same dtype"});
  expect_error([&] { nccl.all_to_all_v(runs, ones, runs, ones); }, {"all_to_all_v", "overlap in memory"});
  // Nothing is pending: a collective still pairs up with every rank's.
  nccl.wait(nccl.all_reduce(shard));
}

TEST_F(NcclCommunicator, BadWaitsAreRefused) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const Tensor x = cuda::to_device(Tensor::zeros({3}, DType::F32), gpu());
  const Request r = nccl.all_reduce(x);
  nccl.wait(r);
  expect_error([&] { nccl.wait(r); }, {"wait on group 'world'", "is not pending"});
  expect_error([&] { nccl.wait(Request{12345}); }, {"is not pending"});
}

TEST_F(NcclCommunicator, BadDeviceIsRefusedBeforeAnyCommunication) {
  expect_error([&] { dist::make_nccl_communicator(*test::world_groups().world, 64); },
               {"group 'world'", "cuda:64 requested", "CUDA device(s)"});
  expect_error([&] { dist::make_nccl_communicator(*test::world_groups().world, -1); }, {"not a device index"});
}

#if defined(FSDP_CUDA_EMULATION)
// A failing NCCL call names the call, the group, rank, device and host, NCCL's
// string for the result and NCCL's last-error text. Injected on every rank before any
// communication, so all ranks fail alike.
TEST_F(NcclCommunicator, FailingNcclCallsAreReportedWithTheirContext) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const Tensor x = cuda::to_device(Tensor::zeros({3}, DType::F32), gpu());
  fsdpEmuNcclInjectError("ncclAllReduce", ncclRemoteError);
  test::expect_error_from([&] { nccl.all_reduce(x); },
                          {"ncclAllReduce(x.data_ptr()", "group 'world'",
                           fmt::format("rank {} of {}", nccl.rank(), nccl.size()),
                           fmt::format("cuda:{}", test::rank_device()),
                           "remote process exited or there was a network error", "NCCL says:", "injected"},
                          {"nccl_communicator.cpp:"});
  fsdpEmuNcclInjectError("ncclAllGather", ncclInvalidUsage);
  expect_error([&] { nccl.all_gather(x, cuda::to_device(Tensor::zeros({3 * nccl.size()}, DType::F32), gpu())); },
               {"ncclAllGather(", "invalid usage"});
  // The communicator still works after a refused call.
  nccl.wait(nccl.all_reduce(x));
}

// A failed ncclCommInitRank: the error names the call and the group; the constructor
// releases the stream and events it made; the next communicator comes up normally.
TEST_F(NcclCommunicator, FailedInitIsReportedAndCleanedUp) {
  fsdpEmuNcclInjectError("ncclCommInitRank", ncclSystemError);
  expect_error([&] { dist::make_nccl_communicator(*test::world_groups().world, test::rank_device()); },
               {"ncclCommInitRank(&comm_, size_, id, rank_)", "group 'world'", "unhandled system error"});
  auto nccl = dist::make_nccl_communicator(*test::world_groups().world, test::rank_device());
  const Tensor x = on(test::filled(DType::F32, 2, [](int64_t) { return 1.0; }), gpu());
  nccl->wait(nccl->all_reduce(x));
  EXPECT_EQ(host(x).get_flat(1), double(nccl->size()));
}

// An asynchronous error (a peer died mid-collective) surfaces at the next wait(). It leaves
// the communicator failed, so the test uses one of its own.
TEST_F(NcclCommunicator, AsyncErrorsSurfaceInWait) {
  auto nccl = dist::make_nccl_communicator(*test::world_groups().world, test::rank_device());
  const Tensor x = cuda::to_device(Tensor::zeros({3}, DType::F32), gpu());
  const Request r = nccl->all_reduce(x);
  fsdpEmuNcclInjectError("ncclCommGetAsyncError", ncclRemoteError);
  expect_error([&] { nccl->wait(r); }, {"an earlier collective (ncclCommGetAsyncError)", "remote process exited"});
  // Later calls report the failed communicator instead of hanging or running.
  expect_error([&] { nccl->all_reduce(x); }, {"ncclAllReduce(", "the communicator failed earlier"});
}

// An NCCL call of all_to_all_v's group that fails: the error names it with its context, the
// group is closed (NCCL drops it), and the next all_to_all_v works. Every rank sends to
// every other, so every rank's first ncclSend fails alike.
TEST_F(NcclCommunicator, FailingCallInsideAllToAllVClosesItsGroup) {
  dist::NcclCommunicator& nccl = test::nccl_world();
  const int size = nccl.size(), rank = nccl.rank();
  if (size == 1) GTEST_SKIP() << "one rank sends nothing to anyone: no ncclSend to fail";
  const std::vector<int64_t> ones(size_t(size), 1);
  const Tensor send = on(test::filled(DType::BF16, size, [&](int64_t i) { return double(rank * 10 + i); }), gpu());
  const Tensor recv = on(Tensor::zeros({size}, DType::BF16), gpu());
  fsdpEmuNcclInjectError("ncclSend", ncclSystemError);
  test::expect_error_from([&] { nccl.all_to_all_v(send, ones, recv, ones); },
                          {"ncclSend(", "group 'world'", fmt::format("rank {} of {}", rank, size),
                           "unhandled system error", "injected"},
                          {"nccl_communicator.cpp:"});
  nccl.wait(nccl.all_to_all_v(send, ones, recv, ones));
  const Tensor g = host(recv);
  for (int64_t i = 0; i < size; ++i) EXPECT_EQ(g.get_flat(i), double(i * 10 + rank)) << "from rank " << i;
}
#endif

}  // namespace
}  // namespace fsdp::dist
