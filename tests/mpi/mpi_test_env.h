// The process groups of an MPI test binary, initialised once by its main
// (tests/mpi/mpi_test_main.cpp) from however mpirun launched it.
#pragma once

#include "fsdp/dist/communicator.h"

namespace fsdp::test {

dist::ProcessGroups& world_groups();

}  // namespace fsdp::test
