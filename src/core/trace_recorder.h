// Private to src/core: the trace recorder's event record and what its CUDA half
// (src/core/cuda/trace_cuda.cpp) and the op profiler share with src/core/trace.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::trace::detail {

struct Event {
  char phase = 'X';  // X complete, b/e async begin/end, C counter
  std::string name, category, args;  // args: a JSON object's text or ""
  double ts = 0, dur = 0;            // microseconds since start()
  int tid = 0;
  uint64_t id = 0;  // async events
};

// Appends under the recorder's lock (nothing checks enabled(): the caller did).
void append(Event e);
// The track of a device stream (named on first sight if name_stream was never called).
int stream_track(int device, void* stream);

#if defined(FSDP_WITH_CUDA)
// Base events, one per device, recorded and waited for now: device time 0 = host now_us().
void cuda_start(const std::vector<int>& devices);
// Waits for every pending device span; appends them (keep) or drops them; gives every
// event back (an op-profiler pair to the op profiler, with its time credited).
void cuda_resolve(bool keep);
// An op-profiler event pair (fsdp/core/op_profile.h) recorded while tracing: the trace
// reads it when it resolves and hands it back to the op profiler then.
void cuda_adopt_op(const char* stub_name, int device, void* stream, void* const events[2]);
#endif

}  // namespace fsdp::trace::detail
