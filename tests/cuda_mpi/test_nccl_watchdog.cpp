// The collective watchdog (fsdp/dist/watchdog.h) on the NCCL communicator, under mpiexec with
// 2 and 4 ranks (skipped on 1). On a GPU the host waits for an NCCL collective at a read-back,
// through the host-wait hook (Note [Host waits] in fsdp/core/host_wait.h); in the emulator it
// waits inside the NCCL call, which calls the same hook. Either way: a rank that stays away
// past the timeout is named by every rank waiting for it, with the collective, its group and
// the step; and an asynchronous NCCL error (ncclCommGetAsyncError: a peer gone mid-collective)
// is reported the same way at the next host wait. abort is off here (the report is recorded),
// so the job goes on; ncclCommAbort ending a waiting collective is the stand-in's own test
// (test_nccl_emulator.cpp). A few seconds each: timeout and grace are 1 s.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cuda_mpi_test_env.h"
#include "../common/scoped_watchdog.h"
#include "fsdp/core/cuda.h"
#include "fsdp/dist/nccl.h"
#include "fsdp/dist/watchdog.h"

#if defined(FSDP_CUDA_EMULATION)
#include <nccl.h>  // the stand-in's fsdpEmuNcclInjectError
#endif

namespace fsdp::dist {
namespace {

using test::ScopedWatchdog;

Device gpu() { return Device::cuda(test::rank_device()); }

Tensor ones_on_gpu(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::F32);
  t.fill_(1.0);
  return cuda::to_device(t, gpu());
}

bool skip() { return !test::cuda_usable() || test::world_groups().world->size() < 2; }

TEST(NcclWatchdog, ALateRankIsNamedByEveryRankWaitingForItsAllReduce) {
  if (skip()) GTEST_SKIP() << "needs 2 ranks with a CUDA device each";
  Communicator& world = *test::world_groups().world;
  NcclCommunicator& nccl = test::nccl_world();  // collective: made before anyone is late
  std::vector<WatchdogReport> reports;
  const int late = world.size() - 1;
  {
    ScopedWatchdog scope({1.0, 0, [&](const WatchdogReport& r) { reports.push_back(r); }, /*abort=*/false});
    set_watchdog_step(9);
    if (world.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    const Tensor x = ones_on_gpu(5);
    nccl.wait(nccl.all_reduce(x));
    EXPECT_EQ(x.to(Device::cpu()).get_flat(4), double(world.size())) << "completed once the late rank arrived";
  }
  if (world.rank() == late) {
    EXPECT_TRUE(reports.empty()) << reports[0].line();
    return;
  }
  ASSERT_EQ(reports.size(), 1u);
  const WatchdogReport& r = reports[0];
  EXPECT_EQ(r.collective, "all_reduce");
  EXPECT_EQ(r.group, "world");
  EXPECT_EQ(r.step, 9);
  EXPECT_EQ(r.cause, "did not complete within 1 s");
  ASSERT_EQ(r.absent.size(), 1u) << r.line();
  EXPECT_EQ(r.absent[0].world_rank, late);
  EXPECT_EQ(r.absent[0].why, "no reply within 1 s: dead, stopped, or busy outside any collective");
}

#if defined(FSDP_CUDA_EMULATION)
// The next ncclCommGetAsyncError in the process reports the error: the test makes its own
// communicator the only one, so the hook's poll asks it.
TEST(NcclWatchdog, AnAsynchronousNcclErrorIsReportedAtTheNextHostWait) {
  if (skip()) GTEST_SKIP() << "needs 2 ranks with a CUDA device each";
  test::release_nccl_communicators();
  auto nccl = make_nccl_communicator(*test::world_groups().world, test::rank_device());
  std::vector<WatchdogReport> reports;
  {
    ScopedWatchdog scope({600.0, 0, [&](const WatchdogReport& r) { reports.push_back(r); }, /*abort=*/false});
    const Tensor x = ones_on_gpu(3);
    nccl->wait(nccl->all_reduce(x));
    fsdpEmuNcclInjectError("ncclCommGetAsyncError", ncclRemoteError);
    cuda::synchronize(test::rank_device());  // a host wait: the hook polls the communicator
    nccl.reset();  // failed for good: gone before the default watchdog (which aborts) is back
  }
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].group, "world");
  EXPECT_EQ(reports[0].cause.rfind("failed (NCCL: remote process exited or there was a network error; NCCL says: ", 0),
            0u)
      << reports[0].cause;
  test::world_groups().world->barrier();
}
#endif

// The failure path as a job meets it, run only by the ctest cuda_nccl_watchdog_abort
// (tests/cuda_mpi/watchdog_abort.sh, which expects exit code 76): the waiting ranks report,
// abort every NCCL communicator (the stand-in ends the collective that waits) and MPI_Abort
// the job, the late rank included.
TEST(NcclWatchdog, DISABLED_AbortsTheJobWithItsExitCode) {
  if (skip()) GTEST_SKIP() << "needs 2 ranks with a CUDA device each";
  Communicator& world = *test::world_groups().world;
  NcclCommunicator& nccl = test::nccl_world();
  ScopedWatchdog scope({1.0, 76, [](const WatchdogReport& r) { std::fprintf(stderr, "%s\n", r.line().c_str()); }});
  set_watchdog_step(3);
  if (world.rank() == world.size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
  const Tensor x = ones_on_gpu(5);
  nccl.wait(nccl.all_reduce(x));
  ADD_FAILURE() << "the job was not aborted";
}

}  // namespace
}  // namespace fsdp::dist
