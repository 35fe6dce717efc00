// Stand-in for NCCL's nccl.h in the emulation build (FSDP_CUDA_EMULATION=ON): the calls
// src/dist/cuda/nccl_communicator.cpp makes, with NCCL 2.x's names, values and documented
// semantics, executed over MPI between the processes of an mpirun job on the emulator's
// device memory (host memory here), or over TCP sockets between processes that never
// initialised MPI (a launch through fsdp_train's TCP store; src/cuda_emu/nccl/nccl_tcp.h).
// Implementation: src/cuda_emu/nccl/nccl.cpp, point-to-point and groups nccl_p2p.cpp.
//
// Semantics kept from NCCL (nccl.h of NCCL 2.28, the user guide's "Collective Operations",
// "Point-to-point communication" and "Group Calls"):
//   * ncclGetUniqueId makes an id; every rank of the clique passes the same id, the clique
//     size and its own rank to ncclCommInitRank, which is collective over those ranks only
//     and uses the calling thread's current CUDA device. The rank that made the id must be a
//     member (NCCL allows any process; here that process gathers the members).
//   * ncclAllGather: recvbuff[i * sendcount ...] = rank i's sendbuff; in place when
//     sendbuff == recvbuff + rank * sendcount.
//   * ncclReduceScatter: recvbuff = block `rank` of the reduction of every rank's sendbuff
//     (nranks * recvcount elements); in place when recvbuff == sendbuff + rank * recvcount.
//   * ncclAllReduce: recvbuff = the reduction of every rank's sendbuff; in place when equal.
//   * ncclBroadcast: recvbuff = root's sendbuff (sendbuff is read on the root only); in
//     place when equal. ncclBcast is the in-place form.
//   * ncclSend(sendbuff, count, type, peer) / ncclRecv(recvbuff, count, type, peer): one
//     message between two ranks of the communicator. Between two ranks, sends and receives
//     match in the order each side issued them, and a matched pair must have the same count
//     and type; count 0 is a message too (it matches a receive of 0, and synchronises), and
//     its buffer is never touched. A rank may send to itself inside a group that also
//     receives from itself. Outside a group each call is a group of its own, so it completes
//     only when its peer has matched it (two ranks that both send first would wait forever).
//   * ncclGroupStart / ncclGroupEnd: the calls between them are launched together at the
//     outermost ncclGroupEnd and progress concurrently: a rank may send to a peer and receive
//     from it in one group (an all-to-all) without either waiting for the other. A call that
//     fails inside a group fails the group: ncclGroupEnd returns that error and none of the
//     group's operations run.
//   * Reductions ncclSum, ncclProd, ncclMax, ncclMin on every integer and float type; float16
//     and bfloat16 are combined in float32 and rounded back once per combination, as NCCL's
//     kernels do. ncclAvg, ncclRedOpCreatePreMulSum and the fp8 types are not emulated
//     (ncclInvalidArgument, saying so).
//   * A call returns ncclSuccess once the work is enqueued on `stream`, which must be a live
//     stream of the communicator's device (or a null stream). Buffers must be device memory
//     of that device (or pinned host memory) and hold the counts given; a collective of
//     count 0 is a no-op.
//   * Errors are the result codes NCCL uses (ncclInvalidArgument for bad arguments,
//     ncclInvalidUsage for misuse of the API, ncclSystemError when MPI or a socket fails), and
//     ncclGetLastError says why, as NCCL's does.
//
// Emulated, where it differs from NCCL:
//   * streams run eagerly (cuda_runtime.h here), so a collective has completed when its call
//     returns: each call waits for its MPI collective, and ranks must issue collectives on a
//     communicator in the same order (as NCCL also requires). While it waits it calls the
//     hook of fsdpEmuNcclSetWaitHook every millisecond (where a GPU's host would wait at a
//     read-back instead); ncclCommAbort then, from that hook or another thread, ends the
//     wait: the call returns ncclRemoteError and the communicator is gone, as NCCL's abort
//     ends the collectives in flight;
//   * in a group, point-to-point calls are checked at the call and run at the outermost
//     ncclGroupEnd, which waits for all of them (streams being eager), and queued copies on
//     their streams run first (the copies enqueued before ncclGroupEnd, as on a GPU);
//     collectives still run at their call, which NCCL also allows (a group's collectives
//     may run one by one). A receive whose matching send has another count is refused
//     (ncclInvalidUsage) where NCCL's behaviour is undefined, and a rank's sends to itself
//     without a receive from itself in the same group are refused where NCCL would hang;
//   * a send completes once its peer's receive has matched it (MPI_Issend); on the TCP
//     transport once the socket took the bytes, a little earlier than NCCL would;
//   * the transport (rings, trees, NVLink, the reduction order NCCL picks) is MPI's, or on
//     the TCP transport a star through the id's maker, reducing in rank order;
//   * counts above INT_MAX elements are refused (MPI 3.1 counts are int).
// Emulator only: fsdpEmuNcclInjectError makes the next call of a given NCCL function fail,
// so tests can check the error paths of the code calling NCCL.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX "-fsdp-emulated"
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_EMULATION 1

extern "C" {

typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

// Emulator only: called every millisecond by a collective while it waits for the other
// ranks (nullptr: none); see "Emulated" above. Returns the hook it replaces.
typedef void (*fsdpEmuNcclWaitHook)(void);
fsdpEmuNcclWaitHook fsdpEmuNcclSetWaitHook(fsdpEmuNcclWaitHook hook);

// Emulator only: the next call of `call` (an NCCL function name, e.g. "ncclAllReduce") in
// this process returns `result`, with ncclGetLastError saying it was injected; for
// "ncclCommGetAsyncError" the call succeeds and reports `result` as the async error.
// `call` == NULL clears a pending injection.
void fsdpEmuNcclInjectError(const char* call, ncclResult_t result);

}  // extern "C"
