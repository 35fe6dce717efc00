// Inside src/core/cuda: a wait for a stream that also reads the device error record (Note
// [Device error record] in fsdp/core/cuda.h), for the places that wait anyway.
#pragma once

#include <cuda_runtime.h>

namespace fsdp::cuda {

// Waits for `stream` (of cuda:device, the current device) with the copy of the device's
// error record enqueued before the wait, when the device has a record; then throws the
// recorded error, if any, after resetting the record on `stream`.
void wait_and_check_device_errors(int device, cudaStream_t stream);

}  // namespace fsdp::cuda
