// The device error record (Note [Device error record] in fsdp/core/cuda.h): one zeroed
// DeviceErrorRecord per device in device memory, made on first use, and its read-back
// through a pinned staging buffer per host thread and device, so the read rides on a wait
// the caller makes anyway.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "device_errors.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/cuda_device_error.h"
#include "fsdp/core/host_wait.h"

namespace fsdp::cuda {
namespace {

constexpr int kMaxDevices = 64;

std::array<std::atomic<DeviceErrorRecord*>, kMaxDevices> g_records{};

void check_index(int device) {
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
}

// Pinned, so that the record's copy is asynchronous and ordered before the caller's wait;
// per thread, so that threads reading back from one device at once do not share a buffer.
// Freed when the thread ends.
struct Staging {
  std::array<DeviceErrorRecord*, kMaxDevices> host{};
  ~Staging() {
    for (DeviceErrorRecord* p : host)
      if (p != nullptr) (void)cudaFreeHost(p);
  }
};
thread_local Staging tl_staging;

const char* op_name(uint32_t op) {
  switch (DeviceErrorOp(op)) {
    case DeviceErrorOp::EmbeddingForward: return "embedding_forward";
    case DeviceErrorOp::EmbeddingBackward: return "embedding_backward";
    case DeviceErrorOp::EmbeddingShardForward: return "embedding_shard_forward";
    case DeviceErrorOp::EmbeddingShardBackward: return "embedding_shard_backward";
    case DeviceErrorOp::CrossEntropy: return "cross_entropy";
    case DeviceErrorOp::CrossEntropyShardStats: return "cross_entropy_shard_stats";
    case DeviceErrorOp::None: break;
  }
  return "?";
}

std::string describe(const DeviceErrorRecord& r) {
  switch (DeviceErrorOp(r.op)) {
    case DeviceErrorOp::EmbeddingForward:
    case DeviceErrorOp::EmbeddingBackward:
    case DeviceErrorOp::EmbeddingShardForward:
    case DeviceErrorOp::EmbeddingShardBackward:
      return fmt::format("{}: token id {} at position {} is outside the vocabulary [0, {})", op_name(r.op), r.value,
                         r.position, r.bound);
    case DeviceErrorOp::CrossEntropy:
    case DeviceErrorOp::CrossEntropyShardStats:
      return fmt::format("{}: target {} at row {} is outside [0, {}) and is not ignore_index ({})", op_name(r.op),
                         r.value, r.position, r.bound, r.ignore_index);
    case DeviceErrorOp::None: break;
  }
  return fmt::format("unknown device error {} (position {}, value {}, bound {})", r.op, r.position, r.value, r.bound);
}

}  // namespace

DeviceErrorRecord* device_error_record(int device) {
  check_index(device);
  if (DeviceErrorRecord* r = g_records[size_t(device)].load(std::memory_order_acquire)) return r;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (DeviceErrorRecord* r = g_records[size_t(device)].load(std::memory_order_relaxed)) return r;
  DeviceGuard guard(device);
  void* p = nullptr;
  FSDP_CUDA_CHECK(cudaMalloc(&p, sizeof(DeviceErrorRecord)));
  FSDP_CUDA_CHECK(cudaMemset(p, 0, sizeof(DeviceErrorRecord)));
  // The memset runs on the legacy stream, which the non-blocking streams do not wait for:
  // wait once here, so that every stream's kernels find the record zeroed.
  FSDP_CUDA_CHECK(cudaDeviceSynchronize());
  auto* r = static_cast<DeviceErrorRecord*>(p);
  g_records[size_t(device)].store(r, std::memory_order_release);
  return r;
}

void wait_and_check_device_errors(int device, cudaStream_t stream) {
  check_index(device);
  DeviceErrorRecord* r = g_records[size_t(device)].load(std::memory_order_acquire);
  if (r == nullptr) {
    wait_for_stream(stream);
    return;
  }
  DeviceErrorRecord*& host = tl_staging.host[size_t(device)];
  if (host == nullptr) FSDP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host), sizeof(DeviceErrorRecord)));
  FSDP_CUDA_CHECK(cudaMemcpyAsync(host, r, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, stream));
  wait_for_stream(stream);
  const DeviceErrorRecord staged = *host;
  if (staged.op == uint32_t(DeviceErrorOp::None)) return;
  FSDP_CUDA_CHECK(cudaMemsetAsync(r, 0, sizeof(DeviceErrorRecord), stream));
  FSDP_FAIL("{} (found on cuda:{} by a kernel and reported at the next read-back from the device)", describe(staged),
            device);
}

void check_device_errors(int device) {
  check_index(device);
  if (g_records[size_t(device)].load(std::memory_order_acquire) == nullptr) return;
  DeviceGuard guard(device);
  wait_and_check_device_errors(device, static_cast<cudaStream_t>(current_stream(device)));
}

}  // namespace fsdp::cuda
