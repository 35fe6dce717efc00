// The host's waits on CUDA streams; see Note [Host waits] in fsdp/core/host_wait.h.
#include "fsdp/core/host_wait.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>

#include "fsdp/core/cuda_check.h"
#include "fsdp/core/error.h"

namespace fsdp::cuda {
namespace {

constexpr int kMaxDevices = 64;

std::atomic<HostWaitHook> g_hook{nullptr};

// One event per device and host thread, made on first use and kept: a polled wait records
// it on the stream it waits for.
struct WaitEvents {
  std::array<cudaEvent_t, kMaxDevices> event{};
  ~WaitEvents() {
    for (cudaEvent_t e : event)
      if (e != nullptr) (void)cudaEventDestroy(e);
  }
};
thread_local WaitEvents tl_events;

}  // namespace

void set_host_wait_hook(HostWaitHook hook) { g_hook.store(hook, std::memory_order_release); }

HostWaitHook host_wait_hook() { return g_hook.load(std::memory_order_acquire); }

void wait_for_stream(void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  const HostWaitHook hook = host_wait_hook();
  if (hook == nullptr) {
    FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  int device = 0;
  FSDP_CUDA_CHECK(cudaGetDevice(&device));
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  cudaEvent_t& e = tl_events.event[size_t(device)];
  if (e == nullptr) FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  FSDP_CUDA_CHECK(cudaEventRecord(e, s));
  using Clock = std::chrono::steady_clock;
  // Once at every wait, even one that finds the stream done (what the hook checks, such as
  // NCCL's asynchronous errors, surfaces at the next wait), then every millisecond.
  hook();
  Clock::time_point next_hook = Clock::now() + std::chrono::milliseconds(1);
  while (true) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return;
    if (r != cudaErrorNotReady) FSDP_CUDA_CHECK(r);
    const Clock::time_point now = Clock::now();
    if (now >= next_hook) {
      hook();
      next_hook = now + std::chrono::milliseconds(1);
    }
  }
}

}  // namespace fsdp::cuda
