// What a device is (host code): its name and memory, for the step log's MFU (the device's
// peak comes from its name, train/device_peak.h) and for start-up messages.
#include <cuda_runtime.h>

#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"

namespace fsdp::cuda {
namespace {

cudaDeviceProp properties(int device) {
  cudaDeviceProp p{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return p;
}

}  // namespace

std::string device_name(int device) { return properties(device).name; }

size_t device_memory_bytes(int device) { return properties(device).totalGlobalMem; }

}  // namespace fsdp::cuda
