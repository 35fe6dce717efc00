// Where the host waits for a CUDA stream, and what it may do meanwhile.
//
// Note [Host waits]
// The CUDA backend makes the host wait at read-backs (copies into host memory, synchronize(),
// check_device_errors: fsdp/core/cuda.h) and the NCCL communicator's barrier. A wait on a
// stream that never finishes (an NCCL collective whose peer died or stopped: its kernel spins
// forever) would block the host in the driver for good. With a hook set, such a wait instead
// records an event on the stream and polls it, calling the hook once at the start and then
// about every millisecond: the
// collective watchdog (fsdp/dist/watchdog.h) sets one once an NCCL communicator exists, checks
// the collectives in flight against dist.timeout_s and NCCL's asynchronous errors there, and
// ends the job when one is overdue. Without a hook a wait is cudaStreamSynchronize, as before.
// Built with the CUDA backend only (real or emulated).
#pragma once

namespace fsdp::cuda {

using HostWaitHook = void (*)();

// The hook waits call (nullptr: none). Set from the host thread that does the waiting.
void set_host_wait_hook(HostWaitHook hook);
HostWaitHook host_wait_hook();

// The host waits until `stream` (a cudaStream_t on the current device) has finished the work
// enqueued on it so far (Note [Host waits]).
void wait_for_stream(void* stream);

}  // namespace fsdp::cuda
