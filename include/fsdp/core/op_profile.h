// A per-op profiler behind op dispatch: every op call made through a stub
// (DispatchStub::operator(), fsdp/core/dispatch.h) is counted and timed by op name (the
// stub's name without "_stub": "matmul", "rmsnorm_forward", ...), so a training step can be
// read op by op against its roofline (bench/gpu_step_bench.cpp, bench/README.md).
//
//   op_profile::reset();
//   op_profile::enable(true);
//   trainer.train_step();
//   op_profile::enable(false);
//   for (const op_profile::OpTime& r : op_profile::report()) ...  // slowest op first
//
// Off by default. Off, an op call pays one relaxed atomic load and a branch and records
// nothing (no lock, no allocation). On:
//   * an op on the CPU is timed by the host's wall clock around the call: the CPU backend
//     returns when its work is done;
//   * an op on cuda:N gets a pair of cudaEvents recorded on N's current stream (Note [CUDA
//     current stream] in fsdp/core/cuda.h) before and after its launch, so its time is
//     what the stream spent from reaching the op to finishing its last kernel, which is
//     the kernel time when the host keeps ahead of the GPU, plus the host's launch time when
//     it does not (a starved GPU shows up against the op that starved it). The pairs come
//     from a per-device pool that grows on demand and are read (cudaEventElapsedTime)
//     only by report(), so profiling adds no host wait per op; report() waits for the
//     recorded events. An op's work on another stream would not be seen (the ops launch
//     on the current stream only).
// While a trace records (fsdp/core/trace.h), every timed call also becomes a span of the
// trace: a CPU op on the calling thread's track, a CUDA op on its stream's track, placed by
// the same event pair (the trace reads it and credits its time here when it is written,
// so until then report() counts such a call without its time).
// An op whose backend calls another op through its front end counts both, the inner time
// inside the outer; no backend does so today. Calls from any thread are recorded (one
// mutex, taken only when on). The emulation build times with the emulator's events: host
// wall time between the records (kernels run at launch there), so its times mean nothing
// for a GPU, only its counts do.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/device.h"

namespace fsdp::op_profile {

struct OpTime {
  std::string op;     // the stub's name without "_stub"
  int64_t calls = 0;  // calls since the last reset(), on every device
  double total_ms = 0;
};

namespace detail {
inline std::atomic<bool> g_enabled{false};
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
void enable(bool on);
// Forgets every count and time (events still pending go back to their pool unread).
void reset();
// Every op called since the last reset(), by total time, longest first (ties by name).
// Waits for the device work recorded so far.
std::vector<OpTime> report();

// Times one op call (constructed by DispatchStub::operator() only while enabled()). The
// name must outlive the profiler: a stub's name, a string literal.
class Scope {
 public:
  Scope(const char* stub_name, Device device);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  Device device_;
  std::chrono::steady_clock::time_point start_;  // a CPU op
  void* events_[2] = {nullptr, nullptr};         // a CUDA op: cudaEvent_t start, end
  void* stream_ = nullptr;                       // a CUDA op: the stream they are recorded on
};

}  // namespace fsdp::op_profile
