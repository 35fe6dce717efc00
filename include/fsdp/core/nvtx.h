// NVTX ranges, so that an Nsight Systems timeline (`nsys profile --trace=cuda,nvtx,mpi`)
// reads like the model: one named range per unit's forward / backward, per collective, per
// optimizer step.
//
//   void Block::forward(...) {
//     FSDP_NVTX_RANGE("block forward");          // until the end of the scope
//     ...
//   }
//   { fsdp::nvtx::Range r(name_.c_str()); ... }  // the same, named explicitly
//
// Rules for callers:
//   * Ranges nest and must close in reverse order on the thread that opened them: use the
//     RAII forms above, never push/pop by hand across scopes.
//   * The name is copied when the range opens, but formatting one costs an allocation: on a
//     hot path pass a string made once (a literal, or a member built at construction), as
//     the NCCL communicator does ("nccl all_gather (group 'shard')").
//   * A range measures the host thread. CUDA work enqueued inside it shows under the range
//     in nsys's "NVTX projection" of the GPU rows; the host time itself is only the enqueue.
//
// Every range is also a span of the trace (fsdp/core/trace.h) while one records, with the
// same name, so a Perfetto trace and an Nsight Systems timeline name the same things.
//
// Backends, chosen at compile time:
//   * real CUDA build (FSDP_WITH_CUDA, not emulated): nvtxRangePushA / nvtxRangePop from
//     the toolkit's header-only nvtx3 (no library to link; costs ~nothing when no profiler
//     is attached);
//   * emulation build (FSDP_CUDA_EMULATION): a recorder (src/core/nvtx.cpp) that tests read
//     with recorded_ranges(): every range opened, in order, with its nesting depth;
//   * CPU-only build: empty inline functions.
#pragma once

#include "fsdp/core/trace.h"

#if defined(FSDP_WITH_CUDA) && !defined(FSDP_CUDA_EMULATION)
#include <nvtx3/nvToolsExt.h>
#define FSDP_NVTX_ENABLED 1
#elif defined(FSDP_CUDA_EMULATION)
#include <string>
#include <vector>
#define FSDP_NVTX_RECORDER 1
#endif

namespace fsdp::nvtx {

// The trace span beside the range; a failure to record it (out of memory) loses the span.
inline void trace_push(const char* name) noexcept {
  if (!trace::enabled()) return;
  try {
    trace::begin(name);
  } catch (...) {
  }
}
inline void trace_pop() noexcept {
  if (!trace::enabled()) return;
  try {
    trace::end();
  } catch (...) {
  }
}

#if defined(FSDP_NVTX_ENABLED)
inline void push(const char* name) noexcept {
  nvtxRangePushA(name);
  trace_push(name);
}
inline void pop() noexcept {
  trace_pop();
  nvtxRangePop();
}
#elif defined(FSDP_NVTX_RECORDER)
void push(const char* name) noexcept;
void pop() noexcept;
#else
inline void push(const char* name) noexcept { trace_push(name); }
inline void pop() noexcept { trace_pop(); }
#endif

// An NVTX range open for the lifetime of the object.
class Range {
 public:
  explicit Range(const char* name) noexcept { push(name); }
  ~Range() { pop(); }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};

#if defined(FSDP_NVTX_RECORDER)
// Emulation only: what the recorder saw, for tests. Ranges are listed in the order they
// opened (all threads); depth 0 is outermost on its thread. At most kMaxRecorded are kept
// (a long emulated run does not grow without bound); later ones are counted in dropped().
struct RecordedRange {
  std::string name;
  int depth = 0;
  bool closed = false;
};
inline constexpr size_t kMaxRecorded = 1 << 16;
std::vector<RecordedRange> recorded_ranges();
size_t dropped_ranges();
int open_ranges();  // ranges open on the calling thread
void clear_recorded_ranges();
#endif

}  // namespace fsdp::nvtx

#define FSDP_NVTX_CONCAT_(a, b) a##b
#define FSDP_NVTX_CONCAT(a, b) FSDP_NVTX_CONCAT_(a, b)
// An NVTX range from here to the end of the enclosing scope.
#define FSDP_NVTX_RANGE(name) const ::fsdp::nvtx::Range FSDP_NVTX_CONCAT(fsdp_nvtx_range_, __LINE__)(name)
