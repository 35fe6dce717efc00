// Launchers of the causal GQA attention kernels (attention.cu; its tensor-core kernels in
// attention_tc.cu), called by attention.cpp and, for the prefill of a KV cache, by
// attention_decode.cpp. Plain C++ on the host side: pointers, element strides and sizes,
// no Tensor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

// Causal attention of T query rows at absolute positions q_pos .. q_pos + T - 1 against
// the keys and values at positions 0 .. q_pos + T - 1 (query row t sees keys j <= q_pos + t).
// attention_forward is q_pos = 0; a KV-cache prefill is q_pos = pos with the cache as k, v.
// doc_start: int32 [B, T], token t's document start in row b (Note [Document masking] in
// fsdp/ops/attention.h; query row t also needs key j >= doc_start[b, t]), or nullptr: one
// document per row. Only with q_pos = 0 (a KV-cache prefill has none).
struct AttentionFwdArgs {
  HeadsView q, k, v, out;
  void* lse;  // [B, H, T] float32 (float64 for float64), or nullptr: not saved
  int64_t B, T, H, KVH, D;
  int64_t q_pos;
  const int32_t* doc_start = nullptr;
};

struct AttentionBwdArgs {
  HeadsView dout, q, k, v, out, dq, dk, dv;
  const void* lse;  // [B, H, T], as saved by the forward
  int64_t B, T, H, KVH, D;
  const int32_t* doc_start = nullptr;
};

// float32, float64, bfloat16 and float16 (float32 accumulation) with D <= kAttentionMaxHeadDim.
constexpr int64_t kAttentionMaxHeadDim = 256;
bool attention_supports(DType t, int64_t head_dim);

// Whether the kernels for dtype t and this head dim run their products on tensor cores
// (WMMA, 16-bit operands, float accumulation): bfloat16 and float16 with D = 64 or 128.
// Everything else runs on the FP32 (FP64) pipes.
bool attention_uses_tensor_cores(DType t, int64_t head_dim);
// Tensor-core kernel launches so far in this process (forward 1, backward 2), so that a
// test can tell which path ran.
uint64_t attention_tensor_core_launches();

void launch_attention_forward(DType t, const AttentionFwdArgs& a, cudaStream_t stream);
void launch_attention_backward(DType t, const AttentionBwdArgs& a, cudaStream_t stream);

}  // namespace fsdp::cuda
