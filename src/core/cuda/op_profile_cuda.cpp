// The op profiler's CUDA events (src/core/op_profile_events.h): a pool per device of
// timing events, created in chunks as a profiled run needs them and kept for the process,
// so a profiled step creates no event once the pool is as large as one report's worth.
#include <cuda_runtime.h>

#include <vector>

#include "../op_profile_events.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/error.h"

namespace fsdp::op_profile::detail {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kChunk = 256;  // events created at once: a small model's step in one go

std::vector<cudaEvent_t>& pool(int device) {
  static std::vector<cudaEvent_t> pools[kMaxDevices];
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  return pools[device];
}

cudaEvent_t take(int device) {
  std::vector<cudaEvent_t>& free = pool(device);
  if (free.empty()) {
    cuda::DeviceGuard guard(device);  // an event belongs to the device current at its creation
    for (int i = 0; i < kChunk; ++i) {
      cudaEvent_t e = nullptr;
      FSDP_CUDA_CHECK(cudaEventCreate(&e));
      free.push_back(e);
    }
  }
  cudaEvent_t e = free.back();
  free.pop_back();
  return e;
}

cudaStream_t stream(int device) { return static_cast<cudaStream_t>(cuda::current_stream(device)); }

}  // namespace

void cuda_take_pair(int device, void* events[2]) {
  events[0] = take(device);
  events[1] = take(device);
}

void cuda_begin(int device, void* events[2]) {
  cuda_take_pair(device, events);
  try {
    FSDP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events[0]), stream(device)));
  } catch (...) {
    cuda_release(device, events);  // the op will not run: nobody else would give them back
    throw;
  }
}

void cuda_end(int device, void* const events[2]) {
  FSDP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events[1]), stream(device)));
}

double cuda_elapsed_ms(int device, void* const events[2]) {
  const auto start = static_cast<cudaEvent_t>(events[0]);
  const auto end = static_cast<cudaEvent_t>(events[1]);
  FSDP_CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  cuda_release(device, events);
  return double(ms);
}

void cuda_release(int device, void* const events[2]) {
  pool(device).push_back(static_cast<cudaEvent_t>(events[0]));
  pool(device).push_back(static_cast<cudaEvent_t>(events[1]));
}

}  // namespace fsdp::op_profile::detail
