// What the tests of tests/cuda_mpi share: the MPI process groups (made once by the binary's
// main), this rank's CUDA device, and NCCL communicators over the world and over split
// shard / replicate groups, made on first use and released before MPI shuts down.
#pragma once

#include "fsdp/dist/communicator.h"
#include "fsdp/dist/nccl.h"

namespace fsdp::test {

dist::ProcessGroups& world_groups();

// Whether every rank on this node has a CUDA device of its own (the emulator: always; a
// real machine: as many GPUs as local ranks, since NCCL refuses two ranks on one GPU).
// The same answer on every rank of a one-node job, so all ranks skip alike.
bool cuda_usable();
// This rank's device: its local rank, modulo the emulator's devices (2 by default, so
// neighbouring ranks use cuda:0 and cuda:1 and no code can assume cuda:0).
int rank_device();

// Split groups over the world: shard groups of 2 ranks when the world size is even (else
// the whole world), replicate groups across them. Made once (collective).
dist::ProcessGroups& split_groups();

// NCCL communicators over world_groups().world, split_groups().shard / .replicate (made once,
// collectively, on first use).
dist::NcclCommunicator& nccl_world();
dist::NcclCommunicator& nccl_shard();
dist::NcclCommunicator& nccl_replicate();
void release_nccl_communicators();

}  // namespace fsdp::test
