// The emulation build's NVTX recorder (fsdp/core/nvtx.h): ranges are kept in one list, in
// the order they opened, so tests can check which collectives (and later which units)
// opened a range and how they nest. Real CUDA builds use nvtx3's inline calls and the
// CPU-only build empty ones, so this file is empty outside the emulation build.
#include "fsdp/core/nvtx.h"

#if defined(FSDP_NVTX_RECORDER)
#include <cstdint>
#include <mutex>
#include <utility>

namespace fsdp::nvtx {
namespace {

std::mutex g_mu;
std::vector<RecordedRange> g_ranges;
size_t g_dropped = 0;
uint64_t g_generation = 0;  // bumped by clear_recorded_ranges
// This thread's open ranges: (generation, index in g_ranges); SIZE_MAX when dropped. An
// entry of an older generation was recorded before a clear and is no longer listed.
thread_local std::vector<std::pair<uint64_t, size_t>> tl_open;

}  // namespace

void push(const char* name) noexcept {
  trace_push(name);
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    size_t index = SIZE_MAX;
    if (g_ranges.size() < kMaxRecorded) {
      index = g_ranges.size();
      g_ranges.push_back(RecordedRange{name != nullptr ? name : "", int(tl_open.size()), false});
    } else {
      ++g_dropped;
    }
    tl_open.emplace_back(g_generation, index);
  } catch (...) {
    // Out of memory while recording: the range goes unrecorded, the program goes on.
  }
}

void pop() noexcept {
  trace_pop();
  std::lock_guard<std::mutex> lock(g_mu);
  if (tl_open.empty()) return;  // unbalanced: nvtxRangePop ignores it too
  const auto [generation, index] = tl_open.back();
  tl_open.pop_back();
  if (generation == g_generation && index < g_ranges.size()) g_ranges[index].closed = true;
}

std::vector<RecordedRange> recorded_ranges() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_ranges;
}

size_t dropped_ranges() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_dropped;
}

int open_ranges() { return int(tl_open.size()); }

void clear_recorded_ranges() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_ranges.clear();
  g_dropped = 0;
  ++g_generation;
}

}  // namespace fsdp::nvtx
#endif
