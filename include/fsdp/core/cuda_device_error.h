// The per-device error record that kernels write when they find bad input (Note [Device
// error record] in fsdp/core/cuda.h): the layout the kernels and the host agree on, and
// where a device's record lives. Includes no fmt, so .cu files can include it.
#pragma once

#include <cstdint>

namespace fsdp::cuda {

// Which check failed; the host turns each into the CPU op's message.
enum class DeviceErrorOp : uint32_t {
  None = 0,
  EmbeddingForward = 1,   // value: a token id outside [0, bound); position: its index in ids
  EmbeddingBackward = 2,  // as EmbeddingForward
  CrossEntropy = 3,       // value: a target outside [0, bound), not ignore_index; position: its row
  EmbeddingShardForward = 4,   // as EmbeddingForward (the vocabulary-parallel lookup)
  EmbeddingShardBackward = 5,  // as EmbeddingForward
  CrossEntropyShardStats = 6,  // as CrossEntropy (the vocabulary-parallel cross-entropy)
};

// In device memory, one per device, zero while no error is recorded. A kernel claims it by
// atomicCAS on `op` from 0, so the first error wins and later ones leave it alone until the
// host has reported it and reset the record.
struct DeviceErrorRecord {
  uint32_t op;  // a DeviceErrorOp
  uint32_t unused;
  int64_t position;
  int64_t value;
  int64_t bound;
  int64_t ignore_index;  // CrossEntropy only
};

// cuda:device's record (device memory), created zeroed on first use. Kernels that validate
// their input take it as an argument.
DeviceErrorRecord* device_error_record(int device);

}  // namespace fsdp::cuda
