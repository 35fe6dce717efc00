// The body of main() for a gtest binary run under mpiexec (tests/mpi, tests/cuda_mpi).
// Include it in exactly one file per binary: it defines fsdp::test::world_groups().
//
// run_tests_on_every_rank initialises the process groups once, runs the tests on every
// rank, and makes the exit code collective: the ranks all-reduce their failure flags, so
// if any rank failed, every rank returns 1 (mpiexec reports the first non-zero exit, and
// no rank's failure can hide behind rank 0's success). Rank 0 prints gtest's usual output;
// the other ranks print only their failures, each line prefixed "[rank N]". An exception
// escaping the tests aborts every rank (the others may be waiting in a collective).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "fsdp/dist/communicator.h"

namespace fsdp::test {

namespace mpi_main {

inline dist::ProcessGroups* g_groups = nullptr;

// Non-zero ranks: failures only, each line tagged with the rank that saw it.
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

}  // namespace mpi_main

dist::ProcessGroups& world_groups() { return *mpi_main::g_groups; }

// `after_tests` runs on every rank once the tests are done, while MPI is still up.
inline int run_tests_on_every_rank(int argc, char** argv, const std::function<void()>& after_tests = nullptr) {
  testing::InitGoogleTest(&argc, argv);
  dist::ProcessGroups groups;
  try {
    groups = dist::init_process_groups(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_process_groups failed: %s\n", e.what());
    dist::abort_all(1);  // the other ranks may be waiting in a collective
  }
  mpi_main::g_groups = &groups;
  const int rank = groups.world->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpi_main::RankFailurePrinter(rank));
  }

  int local_rc = 1;
  try {
    local_rc = RUN_ALL_TESTS();
    if (after_tests) after_tests();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] uncaught: %s\n", rank, e.what());
    dist::abort_all(1);
  }

  // Every rank's verdict decides every rank's exit code.
  Tensor failed = Tensor::zeros({1}, DType::F64);
  failed.set_flat(0, local_rc != 0 ? 1.0 : 0.0);
  groups.world->wait(groups.world->all_reduce(failed));
  const int failed_ranks = int(failed.get_flat(0));
  if (failed_ranks > 0 && (rank == 0 || local_rc != 0)) {
    std::fprintf(stderr, "[rank %d] %d of %d rank(s) failed%s\n", rank, failed_ranks, groups.world->size(),
                 local_rc != 0 ? " (this one included)" : "");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  mpi_main::g_groups = nullptr;
  groups = {};
  dist::shutdown_distributed();
  return failed_ranks > 0 ? 1 : 0;
}

}  // namespace fsdp::test
