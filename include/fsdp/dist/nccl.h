// The NCCL communicator: the collectives of communicator.h on CUDA tensors, for the
// ranks of an existing (MPI) group, which carries NCCL's unique id from its rank 0.
//
// Stream ordering (llm.c's zero.cuh habit): every collective runs on the comm stream
// given at creation, and a cudaEvent is recorded right after it. The caller orders the
// comm stream after whatever produced the inputs (cudaStreamWaitEvent on the comm
// stream) before calling. A request then completes in one of two ways:
//   wait(r):      the host blocks until the collective is done (cudaEventSynchronize);
//   event_of(r):  the event, for cudaStreamWaitEvent(compute_stream, event), so the
//                 compute stream (not the host) waits. This completes r as far as the
//                 communicator is concerned: r must not be waited afterwards, and the
//                 stream wait must be enqueued before further collectives are issued
//                 on this communicator (a later collective may re-record the event;
//                 since all of them run on the one comm stream, waiting on the re-
//                 recorded event still waits for r, only later than necessary).
// No host synchronisation happens anywhere else.
//
// Only in builds with FSDP_CUDA (FSDP_WITH_CUDA defined); the declarations below need
// no CUDA header (streams and events travel as void*).
#pragma once

#include <memory>

#include "fsdp/dist/communicator.h"

namespace fsdp::dist {

class NcclCommunicator : public Communicator {
 public:
  // The cudaEvent_t recorded after r's collective (see above); completes r.
  virtual void* event_of(Request r) = 0;
  virtual int cuda_device() const = 0;
  virtual void* comm_stream() const = 0;  // cudaStream_t
};

// A collective over bootstrap_group (same ranks, same rank order, same name): rank 0
// creates the NCCL unique id and broadcasts it over bootstrap_group, then every rank
// joins the NCCL communicator on cuda_device. comm_stream is a cudaStream_t on that
// device, owned by the caller, which must outlive the communicator.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap_group, int cuda_device,
                                                         void* comm_stream);

}  // namespace fsdp::dist
