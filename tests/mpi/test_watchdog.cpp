// The collective watchdog (fsdp/dist/watchdog.h) under mpiexec with 2 and 4 ranks (skipped on
// 1): a rank that stays away from a collective past the timeout is named by every rank that
// waited for it, with the collective, its group, its sequence number and the step, and why
// (no reply, or waiting in another collective); the collective itself still completes when
// the rank arrives. abort is off here (the report is recorded, or thrown to leave the wait):
// aborting the job is what tests/integration/watchdog.sh checks with fsdp_train itself.
//
// Each test takes a few seconds: the timeout is 1 s and the census grace 1 s.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/dist/watchdog.h"
#include "mpi_test_env.h"
#include "../common/scoped_watchdog.h"

namespace fsdp::dist {
namespace {

Communicator& world() { return *test::world_groups().world; }

Tensor ones(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::F32);
  t.fill_(1.0);
  return t;
}

using test::ScopedWatchdog;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Everyone but the last rank enters `collective` at once; the last one arrives after 3 s,
// spent outside MPI, so it answers no question. The others' deadline (1 s) passes, their
// census waits the 1 s grace for it, each reports once, and the collective completes when it
// arrives.
void expect_a_late_rank_reported(const char* collective, const std::function<void(Communicator&)>& run) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<WatchdogReport> reports;
  {
    ScopedWatchdog scope({1.0, 0, [&](const WatchdogReport& r) { reports.push_back(r); }, /*abort=*/false});
    set_watchdog_step(17);
    const int late = w.size() - 1;
    if (w.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    run(w);
    if (w.rank() == late) {
      EXPECT_TRUE(reports.empty()) << reports[0].line();
      return;
    }
  }
  ASSERT_EQ(reports.size(), 1u) << "one report per rank and collective";
  const WatchdogReport& r = reports[0];
  EXPECT_EQ(r.collective, collective);
  EXPECT_EQ(r.group, "world");
  EXPECT_EQ(r.members, w.size() == 2 ? "world ranks 0-1" : "world ranks 0-3");
  EXPECT_EQ(r.step, 17);
  EXPECT_GT(r.seq, 0u);
  EXPECT_EQ(r.cause, "did not complete within 1 s");
  EXPECT_GE(r.waited_s, 1.0);
  ASSERT_EQ(r.absent.size(), 1u) << r.line();
  EXPECT_EQ(r.absent[0].world_rank, w.size() - 1);
  EXPECT_EQ(r.absent[0].host, host_name());
  EXPECT_EQ(r.absent[0].why, "no reply within 1 s: dead, stopped, or busy outside any collective");
  const std::string line = r.line();
  EXPECT_TRUE(contains(line, fmt::format("watchdog: {} #{} on group 'world' (", collective, r.seq))) << line;
  EXPECT_TRUE(contains(line, fmt::format(") did not complete within 1 s at step 17: world rank {} (host {}) did not "
                                         "arrive (no reply within 1 s",
                                         w.size() - 1, host_name())))
      << line;
}

TEST(Watchdog, ALateRankIsNamedByEveryRankWaitingInAnAllReduce) {
  expect_a_late_rank_reported("all_reduce", [](Communicator& w) {
    Tensor x = ones(3);
    w.wait(w.all_reduce(x));
    EXPECT_EQ(x.get_flat(2), double(w.size())) << "the collective completed once the late rank arrived";
  });
}

TEST(Watchdog, ALateRankIsNamedByEveryRankWaitingInABarrier) {
  expect_a_late_rank_reported("barrier", [](Communicator& w) { w.barrier(); });
}

// A report may throw to leave the wait (tests only); its request is left to MPI.
struct LeaveTheWait {};

// The last rank enters an all-reduce on a group of its own making while the others enter one
// on 'world': a deadlock (collectives issued in different orders). Each side's census finds
// the other waiting elsewhere and says where; then each side leaves its wait and issues the
// collective the others wait in, so the abandoned requests complete and nothing hangs.
TEST(Watchdog, ARankWaitingInAnotherCollectiveIsNamedWithWhereItWaits) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  ProcessGroups other = split_process_groups(test::world_groups(), 0);  // 'shard': every rank, a new communicator
  Communicator& shard = *other.shard;
  std::vector<WatchdogReport> reports;
  // Buffers of abandoned requests must outlive them: MPI writes into them when they complete.
  static Tensor* abandoned_world = new Tensor(ones(1));
  static Tensor* abandoned_shard = new Tensor(ones(1));
  const int odd = w.size() - 1;
  {
    ScopedWatchdog scope({1.0, 0,
                          [&](const WatchdogReport& r) {
                            reports.push_back(r);
                            throw LeaveTheWait{};
                          },
                          /*abort=*/false});
    set_watchdog_step(5);
    Communicator& first = w.rank() == odd ? shard : w;
    Communicator& second = w.rank() == odd ? w : shard;
    Tensor& first_buf = w.rank() == odd ? *abandoned_shard : *abandoned_world;
    EXPECT_THROW(first.wait(first.all_reduce(first_buf)), LeaveTheWait);
    Tensor y = ones(1);
    second.wait(second.all_reduce(y));
    EXPECT_EQ(y.get_flat(0), double(w.size()));
  }
  w.barrier();
  ASSERT_EQ(reports.size(), 1u);
  const WatchdogReport& r = reports[0];
  // A rank whose deadline passed later than another's may find that one already gone on to
  // the collective it waits in (it finished its own census, left its wait and issued the
  // next one): then that rank has arrived, and is rightly not named. Every name given must
  // be right, and the rank that fired first names everyone (its census query reaches each
  // other rank before that rank can finish a census of its own), so some rank's list is whole.
  size_t whole = 0;
  if (w.rank() == odd) {
    EXPECT_EQ(r.group, "shard");
    EXPECT_EQ(r.seq, 1u);
    EXPECT_LE(r.absent.size(), size_t(w.size() - 1)) << r.line();
    for (const auto& a : r.absent) {
      EXPECT_TRUE(contains(a.why, "it entered 0 collective(s) on this group and waits in all_reduce #")) << a.why;
      EXPECT_TRUE(contains(a.why, "on group 'world'")) << a.why;
    }
    whole = r.absent.size() == size_t(w.size() - 1);
  } else {
    EXPECT_EQ(r.group, "world");
    EXPECT_LE(r.absent.size(), 1u) << r.line();
    for (const auto& a : r.absent) {
      EXPECT_EQ(a.world_rank, odd);
      EXPECT_EQ(a.why, fmt::format("it entered {} collective(s) on this group and waits in all_reduce #1 on "
                                   "group 'shard'",
                                   r.seq - 1));
    }
    whole = r.absent.size() == 1;
  }
  Tensor wholes = ones(1);
  wholes.fill_(double(whole));
  w.wait(w.all_reduce(wholes));
  EXPECT_GE(wholes.get_flat(0), 1.0) << "no rank named every rank that waited elsewhere";
}

}  // namespace
}  // namespace fsdp::dist
