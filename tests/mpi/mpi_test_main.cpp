// main() of the `mpi` test binary, run under mpiexec with 1, 2 and 4 ranks.
//
// It initialises the process groups once (test::world_groups(), mpi_test_env.h), runs
// the tests on every rank, and makes the exit code collective: the ranks all-reduce
// their failure flags, so if any rank failed, every rank returns 1 (mpiexec reports the
// first non-zero exit, and no rank's failure can hide behind rank 0's success). Rank 0
// prints gtest's usual output; the other ranks print only their failures, each line
// prefixed "[rank N]".
//
// The binary also counts C++ heap allocations (test::heap_allocations()), so a test can
// hold the steady-state collectives to zero. Only this file may replace operator new in
// this binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "fsdp/dist/communicator.h"
#include "mpi_test_env.h"
#define FSDP_DEFINE_ALLOCATION_COUNTER
#include "../common/count_allocations.h"

namespace {
fsdp::dist::ProcessGroups* g_groups = nullptr;
}  // namespace

namespace fsdp::test {

dist::ProcessGroups& world_groups() { return *g_groups; }

}  // namespace fsdp::test

namespace {

// Non-zero ranks: failures only, each tagged with the rank that saw it.
class RankFailurePrinter final : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::string text = std::string(r.file_name() ? r.file_name() : "?") + ":" + std::to_string(r.line_number()) +
                       ": Failure\n" + r.summary();
    std::string tagged;
    for (size_t b = 0; b < text.size();) {
      const size_t e = std::min(text.find('\n', b), text.size());
      tagged += "[rank " + std::to_string(rank_) + "] " + text.substr(b, e - b) + "\n";
      b = e + 1;
    }
    std::fputs(tagged.c_str(), stderr);
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
    fsdp::dist::abort_all(1);  // the other ranks may be waiting in a collective
  }
  g_groups = &groups;
  const int rank = groups.world->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }

  const int local_rc = RUN_ALL_TESTS();

  // Every rank's verdict decides every rank's exit code.
  fsdp::Tensor failed = fsdp::Tensor::zeros({1}, fsdp::DType::F64);
  failed.set_flat(0, local_rc != 0 ? 1.0 : 0.0);
  groups.world->wait(groups.world->all_reduce(failed));
  const int failed_ranks = int(failed.get_flat(0));
  if (failed_ranks > 0 && (rank == 0 || local_rc != 0)) {
    std::fprintf(stderr, "[rank %d] %d of %d rank(s) failed%s\n", rank, failed_ranks, groups.world->size(),
                 local_rc != 0 ? " (this one included)" : "");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  g_groups = nullptr;
  groups = {};
  fsdp::dist::shutdown_distributed();
  return failed_ranks > 0 ? 1 : 0;
}
