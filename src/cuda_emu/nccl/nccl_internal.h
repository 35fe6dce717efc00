// Private to the emulated NCCL (src/cuda_emu/nccl): what its collectives and communicators
// (nccl.cpp) share with its point-to-point calls and groups (nccl_p2p.cpp).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <string>

namespace fsdp_emu {
class TcpClique;
}

struct ncclComm {
  int nranks, rank, device;
  MPI_Comm mpi;  // MPI_COMM_NULL for a one-rank clique, or one over TCP
  ncclResult_t async;
  std::atomic<bool> busy{false};     // a call is waiting for the other ranks
  std::atomic<bool> aborted{false};  // ncclCommAbort came meanwhile: the waiting call frees it
  fsdp_emu::TcpClique* tcp = nullptr;  // the TCP transport's clique, when the id was made for it
  bool abandoned = false;  // MPI operations on it were given up in flight (free_comm: as pending)
};

namespace fsdp_emu {

// An NCCL datatype: its name, size, the MPI datatype that moves it (float16 and bfloat16:
// ours, made by the first ncclCommInitRank over MPI) and whether it is a 16-bit float.
struct Type {
  const char* name;
  size_t size;
  MPI_Datatype mpi;
  bool half;
};

// One call's checked arguments.
struct Call {
  const char* name;
  ncclComm_t comm;
  Type type;
  size_t count;  // elements per rank-sized block
};

// Records why for ncclGetLastError and returns r; inside a group, r also fails the group
// (note_group_failure).
ncclResult_t fail(ncclResult_t r, const std::string& why);
// "0x..." for messages.
std::string str(const void* p);
std::string mpi_error(int rc);

// comm is live and has not failed.
ncclResult_t check_comm(const char* call, ncclComm_t comm);
// comm, count, type, op (when reducing; nullptr otherwise) and stream; fills *c and runs the
// stream's queued copies first (Note [Deferred copies]).
ncclResult_t prologue(Call* c, const char* call, ncclComm_t comm, size_t count, ncclDataType_t type,
                      const ncclRedOp_t* op, cudaStream_t stream);
// A buffer the call reads or writes: `bytes` of device memory on the communicator's device.
ncclResult_t check_buffer(const Call& c, const char* what, const void* p, size_t bytes);
// Marks comm failed: its later calls return r (ncclCommGetAsyncError reports it).
void mark_failed(ncclComm_t comm, ncclResult_t r);
// Frees comm (already removed from the live set). pending (or comm->abandoned): MPI work on
// it was given up in flight (an aborted wait), so its MPI communicator is left to MPI_Finalize.
void free_comm(ncclComm_t comm, bool pending);
// The hook of fsdpEmuNcclSetWaitHook (nullptr: none).
void (*wait_hook())(void);

// Groups (nccl_p2p.cpp): called by fail(); inside ncclGroupStart / ncclGroupEnd, the first
// failure is remembered and ncclGroupEnd returns it.
void note_group_failure(ncclResult_t r);

}  // namespace fsdp_emu
