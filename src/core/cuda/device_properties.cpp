// What a device is (host code): its name and memory, for the step log's MFU (the device's
// peak comes from its name, obs/device_peak.h) and for start-up messages.
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"

namespace fsdp::cuda {
namespace {

// cudaGetDeviceProperties fills every field and can take milliseconds; start-up asks for
// the same device's name and memory several times, so each device is asked once.
const cudaDeviceProp& properties(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static std::unique_ptr<cudaDeviceProp> cache[kMaxDevices];
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  std::lock_guard<std::mutex> lock(mu);
  if (!cache[device]) {
    auto p = std::make_unique<cudaDeviceProp>();
    FSDP_CUDA_CHECK(cudaGetDeviceProperties(p.get(), device));
    cache[device] = std::move(p);
  }
  return *cache[device];
}

}  // namespace

std::string device_name(int device) { return properties(device).name; }

size_t device_memory_bytes(int device) { return properties(device).totalGlobalMem; }

}  // namespace fsdp::cuda
