// The CUDA half of the op profiler (fsdp/core/op_profile.h), in src/core/cuda/
// op_profile_cuda.cpp, built only with a CUDA backend. Events travel as void*
// (cudaEvent_t) so that src/core/op_profile.cpp needs no CUDA header. The cuda_* functions
// are called with the profiler's lock held, which also guards the event pools.
#pragma once

#include <string>
#include <string_view>

namespace fsdp::op_profile::detail {

// Takes a start/end pair from the device's pool (growing it when empty).
void cuda_take_pair(int device, void* events[2]);
// cuda_take_pair, then records the start on the device's current stream.
void cuda_begin(int device, void* events[2]);
// Records the end on the device's current stream.
void cuda_end(int device, void* const events[2]);
// Waits for the end event, returns the milliseconds between the two, and gives the pair
// back to the pool.
double cuda_elapsed_ms(int device, void* const events[2]);
// Gives the pair back unread (reset): recording it again later is allowed even while the
// stream has not reached it yet.
void cuda_release(int device, void* const events[2]);

// Implemented in src/core/op_profile.cpp; these take the profiler's lock themselves.
// A pair handed to the trace (Scope's end while tracing) comes back here once the trace has
// read it: its time is added to the op's total and the pair goes back to the pool.
void credit_traced(const char* stub_name, int device, void* const events[2], double ms);
// A pair for other timed stream work (the trace's StreamSpan), and its return.
void lend_pair(int device, void* events[2]);
void return_pair(int device, void* const events[2]);

// "matmul" for the stub name "matmul_stub" (src/core/op_profile.cpp).
std::string op_name(std::string_view stub);

}  // namespace fsdp::op_profile::detail
