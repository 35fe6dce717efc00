// main() of the `mpi` test binary, run under mpiexec with 1, 2 and 4 ranks.
//
// tests/common/mpi_test_main.h does the work: process groups (test::world_groups(),
// mpi_test_env.h), rank 0's report, the other ranks' failures, a collective exit code.
//
// The binary also counts C++ heap allocations (test::heap_allocations()), so a test can
// hold the steady-state collectives to zero. Only this file may replace operator new in
// this binary.
#include "../common/mpi_test_main.h"
#include "mpi_test_env.h"
#define FSDP_DEFINE_ALLOCATION_COUNTER
#include "../common/count_allocations.h"

int main(int argc, char** argv) { return fsdp::test::run_tests_on_every_rank(argc, argv); }
