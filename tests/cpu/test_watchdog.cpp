// The watchdog's report line and settings, without MPI. What the ranks find out about each
// other is tested under mpiexec (tests/mpi/test_watchdog.cpp) and with fsdp_train itself
// (tests/integration/watchdog.sh).
#include <gtest/gtest.h>

#include "fsdp/dist/watchdog.h"
#include "test_util.h"

namespace fsdp::dist {
namespace {

WatchdogReport report() {
  WatchdogReport r;
  r.collective = "all_gather";
  r.group = "shard";
  r.members = "world ranks 4-7";
  r.seq = 1234;
  r.step = 57;
  r.cause = "did not complete within 20 s";
  r.exit_code = 76;
  return r;
}

TEST(WatchdogReport, OneLineGroupsTheAbsentRanksByReason) {
  WatchdogReport r = report();
  const std::string silent = "no reply within 2 s: dead, stopped, or busy outside any collective";
  r.absent = {{6, "nodeb", silent},
              {5, "nodeb", "it entered 1233 collective(s) on this group and waits in all_reduce #88 on group 'world'"},
              {7, "nodeb", silent}};
  EXPECT_EQ(r.line(),
            "watchdog: all_gather #1234 on group 'shard' (world ranks 4-7) did not complete within 20 s at step 57: "
            "world ranks 6 (host nodeb), 7 (host nodeb) did not arrive (no reply within 2 s: dead, stopped, or busy "
            "outside any collective); world rank 5 (host nodeb) did not arrive (it entered 1233 collective(s) on this "
            "group and waits in all_reduce #88 on group 'world'); aborting the job with exit code 76");
}

TEST(WatchdogReport, BeforeTheFirstStepAndWithNobodyMissing) {
  WatchdogReport r = report();
  r.step = -1;
  r.exit_code = 0;  // abort off (tests)
  r.cause = "failed (MPI_Test: MPI_ERR_TRUNCATE: message truncated)";
  EXPECT_EQ(r.line(),
            "watchdog: all_gather #1234 on group 'shard' (world ranks 4-7) failed (MPI_Test: MPI_ERR_TRUNCATE: message "
            "truncated) before the first step: every member arrived, yet it did not complete (the network between "
            "them?)");
}

TEST(WatchdogOptions, GraceIsATenthOfTheTimeoutBetweenOneAndFiveSeconds) {
  EXPECT_EQ(watchdog_grace_seconds(0.5), 1.0);
  EXPECT_EQ(watchdog_grace_seconds(20), 2.0);
  EXPECT_EQ(watchdog_grace_seconds(600), 5.0);
}

TEST(WatchdogOptions, DefaultIsNcclsTenMinutesAndBadTimeoutsAreRefused) {
  EXPECT_EQ(WatchdogOptions{}.timeout_s, 600.0);
  const WatchdogOptions saved = watchdog_options();
  test::expect_error([] { configure_watchdog({-1.0}); }, {"watchdog: timeout -1 s is not in [0, 1e9)"});
  EXPECT_EQ(watchdog_options().timeout_s, saved.timeout_s) << "a refused setting changes nothing";
}

}  // namespace
}  // namespace fsdp::dist
