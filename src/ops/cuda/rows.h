// The layout types the CUDA launchers share with their host callers. Plain C++, no CUDA
// or fmt: included by both the .cu and the .cpp side (the .cpp side builds them from
// Tensors with launch_args.h).
#pragma once

#include <cstdint>

namespace fsdp::cuda {

// A 2-D operand with packed rows and its own row stride (a column slice of a fused buffer).
struct RowsView {
  void* data;
  int64_t stride;  // elements between rows
};

// Element (b, t, h, d) of a [B, T, heads, D] operand with (heads, D) packed is at
// data[b * s0 + t * st + h * sh + d]: sh = D for the activations, and for a KV cache
// [B, KVH, S, D] read as keys (b, position t, kv head h): s0 = its stride(0), st = D,
// sh = its stride(1).
struct HeadsView {
  void* data;
  int64_t s0, st, sh;
};

}  // namespace fsdp::cuda
