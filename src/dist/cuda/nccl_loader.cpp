// NCCL, loaded when a GPU run of several ranks first calls it (fsdp/core/cuda_libraries.h
// says where it is looked for and why it is not linked). One forwarder per function the
// communicator calls (fsdp/core/lazy_symbol.h); the emulation build links its stand-in.
#if defined(FSDP_CUDA_LOADS_LIBRARIES) && defined(FSDP_WITH_NCCL)
#include <nccl.h>

#include "fsdp/core/lazy_symbol.h"

// clang-format off
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclGetVersion, (int* version), (version))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclGetUniqueId, (ncclUniqueId* id), (id))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclCommInitRank,
                   (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error),
                   (comm, error))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, const char*, ncclGetErrorString, (ncclResult_t result), (result))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, const char*, ncclGetLastError, (ncclComm_t comm), (comm))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclAllGather,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, recv, count, type, comm, stream))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclReduceScatter,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                    ncclComm_t comm, cudaStream_t stream),
                   (send, recv, count, type, op, comm, stream))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclAllReduce,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                    ncclComm_t comm, cudaStream_t stream),
                   (send, recv, count, type, op, comm, stream))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclBroadcast,
                   (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, recv, count, type, root, comm, stream))
// all_to_all_v: grouped point-to-point (NCCL 2.7 and later).
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclSend,
                   (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream),
                   (send, count, type, peer, comm, stream))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclRecv,
                   (void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream),
                   (recv, count, type, peer, comm, stream))
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclGroupStart, (), ())
FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclGroupEnd, (), ())
// clang-format on
#endif  // FSDP_CUDA_LOADS_LIBRARIES && FSDP_WITH_NCCL
