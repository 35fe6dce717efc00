// Rotary position embedding, in the rotate-half convention of Hugging Face Llama (so its
// q_proj / k_proj weights load unchanged): for head dim D, half = D/2, i < half,
//   inv_freq[i] = theta^(-2i/D),  angle(p, i) = p * inv_freq[i]
//   y[i]      = x[i] * cos - x[i+half] * sin
//   y[i+half] = x[i+half] * cos + x[i] * sin
// x, y: [B, T, H, D], the last two dims packed (stride(3) == 1, stride(2) == D), dims 0-1
// may be strided (views into a fused qkv buffer). y may alias x (in place).
// Position of token t is pos_offset + t (pos_offset > 0 when decoding with a KV cache),
// or, with doc_start defined (int32 [B, T], Note [Document masking] in attention.h),
// pos_offset + t - doc_start[b, t]: positions restart at 0 at each document of a packed row.
// Backward is the rotation by -angle: dx[i] = dy[i]*cos + dy[i+half]*sin, ...
#pragma once

#include <span>

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

struct RopeTables {
  Tensor cos;  // [max_positions, D/2] float32
  Tensor sin;  // [max_positions, D/2] float32
};

// Angles computed in double and rounded once, so tables are as exact as float32 allows.
RopeTables make_rope_tables(int64_t max_positions, int64_t head_dim, double theta, Device device = Device::cpu());
// The same for given frequencies (D/2 of them, each positive and finite): angle(p, i) =
// p * inv_freq[i]. A scaled RoPE (model/rope_scaling.h) is only other frequencies.
RopeTables make_rope_tables(int64_t max_positions, std::span<const double> inv_freq, Device device = Device::cpu());

void rope_forward(const Tensor& x, const Tensor& y, const RopeTables& tables, int64_t pos_offset,
                  const Tensor& doc_start = Tensor());
void rope_backward(const Tensor& dy, const Tensor& dx, const RopeTables& tables, int64_t pos_offset,
                   const Tensor& doc_start = Tensor());

// inverse == true applies the rotation by -angle (the backward); doc_start may be undefined.
using rope_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, bool, const Tensor&);
FSDP_DECLARE_DISPATCH(rope_fn, rope_stub);

}  // namespace fsdp
