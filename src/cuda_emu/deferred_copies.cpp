// Note [Deferred copies]
// A GPU runs an asynchronous copy whenever its stream gets to it, possibly long after the
// call returned and after work on other streams; code that reads a copy's destination, or
// overwrites its source, without an event or a synchronisation ordering it after the copy
// is racing, and usually wins on a real GPU by luck of timing. The emulator otherwise runs
// everything at once, so such a race would always "win" here. Instead, a cudaMemcpyAsync
// between device or page-locked memory on a stream the program created is queued on that
// stream and runs as late as CUDA's ordering allows:
//   * before anything else is enqueued on the same stream (a kernel, a memset, another
//     copy that cannot wait, a cuBLASLt GEMM, an NCCL collective, cudaMallocAsync /
//     cudaFreeAsync), since a stream runs in order;
//   * up to an event's position when another stream waits for the event, or the host
//     synchronises on it (cudaStreamWaitEvent, cudaEventSynchronize, cudaEventQuery);
//   * all of the stream on cudaStreamSynchronize, cudaStreamQuery, cudaStreamDestroy, and
//     every stream on cudaDeviceSynchronize, cudaFree and cudaFreeHost (which synchronise);
//   * the copies that touch an allocation before cudaFreeAsync frees it (a real GPU might
//     reuse the memory under the copy; here it would be a use after free).
// So a missing event shows as stale data (the other stream, or the host reading pinned
// memory, sees what was there before the copy), which the comparisons in the tests catch.
// Copies on the null or per-thread stream, and copies to or from pageable memory (which
// CUDA performs synchronously), still run at once. FSDP_EMU_DEFER_COPIES=0 turns this off.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "internal.h"

namespace fsdp_emu {
namespace {

struct Pending {
  void* dst;
  const void* src;
  size_t bytes;
  uint64_t seq;
};

struct Queues {
  std::mutex mu;
  std::unordered_map<const void*, std::deque<Pending>> by_stream;
  uint64_t seq = 0;
  bool enabled = [] {
    const char* v = std::getenv("FSDP_EMU_DEFER_COPIES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
};

Queues& queues() {
  static Queues* q = new Queues();  // never destroyed: streams drain during static destruction
  return *q;
}

void run_until(std::deque<Pending>& d, uint64_t upto) {
  while (!d.empty() && d.front().seq <= upto) {
    std::memcpy(d.front().dst, d.front().src, d.front().bytes);
    d.pop_front();
  }
}

bool overlaps(const Pending& p, uintptr_t begin, uintptr_t end) {
  const auto in = [&](const void* x) {
    const auto u = reinterpret_cast<uintptr_t>(x);
    return u < end && u + p.bytes > begin;
  };
  return in(p.dst) || in(p.src);
}

}  // namespace

bool may_defer(cudaStream_t stream) {
  return queues().enabled && stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
}

void defer_copy(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  Queues& q = queues();
  std::lock_guard<std::mutex> lock(q.mu);
  q.by_stream[stream].push_back(Pending{dst, src, bytes, ++q.seq});
}

uint64_t stream_mark(cudaStream_t stream) {
  Queues& q = queues();
  std::lock_guard<std::mutex> lock(q.mu);
  const auto it = q.by_stream.find(stream);
  return it == q.by_stream.end() || it->second.empty() ? 0 : it->second.back().seq;
}

void drain(cudaStream_t stream, uint64_t upto) {
  Queues& q = queues();
  std::lock_guard<std::mutex> lock(q.mu);
  const auto it = q.by_stream.find(stream);
  if (it != q.by_stream.end()) run_until(it->second, upto);
}

void drain_all() {
  Queues& q = queues();
  std::lock_guard<std::mutex> lock(q.mu);
  for (auto& [stream, d] : q.by_stream) run_until(d, UINT64_MAX);
}

void drain_touching(const void* base, size_t bytes) {
  Queues& q = queues();
  std::lock_guard<std::mutex> lock(q.mu);
  const auto begin = reinterpret_cast<uintptr_t>(base), end = begin + bytes;
  for (auto& [stream, d] : q.by_stream) {
    uint64_t last = 0;
    for (const Pending& p : d)
      if (overlaps(p, begin, end)) last = p.seq;
    run_until(d, last);
  }
}

}  // namespace fsdp_emu
