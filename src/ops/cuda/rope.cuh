// Launcher of the RoPE kernel (rope.cu), called by rope.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

// x, y: [B, T, H, D] with (H, D) packed and element strides s0, s1 for dims 0 and 1;
// cos, sin: [positions, D/2] float32. y may be x. Token (b, t) is at position
// pos_offset + t - doc_start[b * T + t] (without doc_start: pos_offset + t).
struct RopeArgs {
  const void* x;
  int64_t xs0, xs1;
  void* y;
  int64_t ys0, ys1;
  int64_t B, T, H, D;
  const float* cos;
  const float* sin;
  int64_t pos_offset;
  bool inverse;
  const int32_t* doc_start;  // [B, T] or nullptr (Note [Document masking] in fsdp/ops/attention.h)
};

bool rope_supports(DType t);  // float32, float64, bfloat16, float16
void launch_rope(DType t, const RopeArgs& a, cudaStream_t stream);

}  // namespace fsdp::cuda
