// The NCCL communicator: the collectives of communicator.h on CUDA tensors, for the ranks
// of an existing (MPI) group, which carries NCCL's unique id from its rank 0.
//
// Note [NCCL stream ordering]
// Collectives run on a communication stream of their own, joined to the compute stream by
// events (llm.c's zero.cuh habit, PyTorch's ProcessGroupNCCL), so that an all-gather of the
// next unit or a reduce-scatter of the last one overlaps the compute stream's kernels:
//   issue (all_gather, ...):  record `ready` on the caller's current stream of the device
//                             (Note [CUDA current stream] in fsdp/core/cuda.h: the compute
//                             stream), make the comm stream wait for it, enqueue the NCCL
//                             call on the comm stream, record `done` there;
//   wait(r):                  make the caller's current stream wait for `done`. The host
//                             does not block: kernels enqueued afterwards read the output,
//                             and memory the collective used may be freed (stream-ordered)
//                             or reused. Host code reads results through fsdp::cuda::copy
//                             or synchronize(), which wait for that stream.
// So inputs must be produced, and outputs allocated, on the current stream before the call
// (or ordered before it by the caller), and neither may be touched until wait(r) has been
// called and the work after it is on the same stream. wait_seconds stays the host time
// spent in wait(), which is the enqueue only: time spent waiting on communication is on
// the GPU, visible in an nsys timeline (every collective is an NVTX range named
// "nccl <collective> (group '<name>')", fsdp/core/nvtx.h).
// barrier() is the one call that blocks the host: a one-element all-reduce on the comm
// stream, synchronised.
//
// Byte accounting (stats()) is the MPI communicator's: the ring volume of communicator.h,
// whatever NCCL does inside.
//
// Only in builds with a CUDA backend and NCCL (FSDP_WITH_NCCL: the real toolkit's NCCL, or
// the emulation build's stand-in over MPI, src/cuda_emu/include/nccl.h); the declarations
// below need no CUDA header (streams travel as void*).
#pragma once

#include <memory>

#include "fsdp/dist/communicator.h"

namespace fsdp::dist {

class NcclCommunicator : public Communicator {
 public:
  virtual int cuda_device() const = 0;
  virtual void* comm_stream() const = 0;  // cudaStream_t
};

// A collective over bootstrap_group (same ranks, same rank order, same name): rank 0
// creates the NCCL unique id and broadcasts it over bootstrap_group, then every rank
// joins the NCCL communicator on cuda_device (one device per rank: NCCL refuses two ranks
// of one clique on one GPU). comm_stream: nullptr to have the communicator create and own a
// non-blocking stream on cuda_device (the normal case), or a cudaStream_t on that device,
// owned by the caller, which must outlive the communicator.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap_group, int cuda_device,
                                                         void* comm_stream = nullptr);

// The process groups of a run on CUDA (a collective over host's groups): the shard,
// replicate, tensor, expert and expert shard groups, which carry the FSDP engine's and the
// model's CUDA tensors, re-made as NCCL communicators over the same ranks, each
// bootstrapped through its host counterpart, with a communication stream of its own (a
// HYBRID_SHARD all-gather and a replicate all-reduce may overlap, and so may the tokens'
// all-to-alls and the next unit's all-gather). Without expert parallelism the expert shard
// group is the shard group's ranks, idle: it shares the shard communicator. A group of one
// rank stays a local communicator, which needs no NCCL (a laptop run never initialises MPI
// or NCCL). world stays host's: it carries the step's host-side loss, votes and the config
// check.
ProcessGroups make_nccl_process_groups(const ProcessGroups& host, int cuda_device);

}  // namespace fsdp::dist
