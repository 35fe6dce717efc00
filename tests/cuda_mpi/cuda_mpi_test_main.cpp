// main() of the `cuda` + MPI test binary (tests/cuda_mpi), run under mpiexec with 1, 2 and
// 4 ranks: in the emulation build on the CPU emulator with the NCCL stand-in over MPI
// (label emulated-gpu), in a CUDA build on real GPUs with real NCCL (label gpu; the tests
// skip themselves unless every rank on the node has a GPU of its own).
//
// As tests/mpi/mpi_test_main.cpp: it initialises the process groups once, runs the tests on
// every rank, prints only rank 0's report and the other ranks' failures, and makes the exit
// code collective, so no rank's failure hides behind another's success.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cuda_mpi_test_env.h"
#include "fsdp/dist/communicator.h"

namespace {
fsdp::dist::ProcessGroups* g_groups = nullptr;
}  // namespace

namespace fsdp::test {
dist::ProcessGroups& world_groups() { return *g_groups; }
}  // namespace fsdp::test

namespace {

class RankFailurePrinter final : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n[rank %d] %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), rank_, r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  fsdp::dist::ProcessGroups groups;
  try {
    groups = fsdp::dist::init_process_groups(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_process_groups failed: %s\n", e.what());
    fsdp::dist::abort_all(1);
  }
  g_groups = &groups;
  const int rank = groups.world->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }

  int local_rc = 1;
  try {
    local_rc = RUN_ALL_TESTS();
    fsdp::test::release_nccl_communicators();  // while MPI is up
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] uncaught: %s\n", rank, e.what());
    fsdp::dist::abort_all(1);  // the other ranks may wait in a collective
  }

  fsdp::Tensor failed = fsdp::Tensor::zeros({1}, fsdp::DType::F64);
  failed.set_flat(0, local_rc != 0 ? 1.0 : 0.0);
  groups.world->wait(groups.world->all_reduce(failed));
  const int failed_ranks = int(failed.get_flat(0));
  if (failed_ranks > 0 && (rank == 0 || local_rc != 0))
    std::fprintf(stderr, "[rank %d] %d of %d rank(s) failed%s\n", rank, failed_ranks, groups.world->size(),
                 local_rc != 0 ? " (this one included)" : "");
  std::fflush(stdout);
  std::fflush(stderr);
  g_groups = nullptr;
  groups = {};
  fsdp::dist::shutdown_distributed();
  return failed_ranks > 0 ? 1 : 0;
}
