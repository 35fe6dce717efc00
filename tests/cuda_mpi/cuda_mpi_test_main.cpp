// main() of the `cuda` + MPI test binary (tests/cuda_mpi), run under mpiexec with 1, 2 and
// 4 ranks: in the emulation build on the CPU emulator with the NCCL stand-in over MPI
// (label emulated-gpu), in a CUDA build on real GPUs with real NCCL (label gpu; the tests
// skip themselves unless every rank on the node has a GPU of its own).
//
// As tests/mpi/mpi_test_main.cpp, through tests/common/mpi_test_main.h; the NCCL
// communicators the tests made are released after the tests, while MPI is still up.
#include "../common/mpi_test_main.h"
#include "cuda_mpi_test_env.h"

int main(int argc, char** argv) {
  return fsdp::test::run_tests_on_every_rank(argc, argv, [] { fsdp::test::release_nccl_communicators(); });
}
