// Inputs of the attention op tests (test_op_attention*.cpp): a shape and q, k, v cut from one
// fused [B, T, (H + 2 KVH) * D] projection buffer, exactly as the model's qkv linear hands
// them to the op (views strided in dims 0-1).
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "test_util.h"

namespace fsdp::test {

struct AttentionShape {
  int64_t B, T, H, KVH, D;
};

struct Qkv {
  Tensor fused, q, k, v;
};

inline Qkv fused_qkv(const AttentionShape& s, DType dt, uint64_t seed) {
  Qkv r;
  r.fused = random_tensor({s.B, s.T, (s.H + 2 * s.KVH) * s.D}, dt, seed);
  const Tensor heads = r.fused.reshape({s.B, s.T, s.H + 2 * s.KVH, s.D});
  r.q = heads.narrow(2, 0, s.H);
  r.k = heads.narrow(2, s.H, s.KVH);
  r.v = heads.narrow(2, s.H + s.KVH, s.KVH);
  return r;
}

}  // namespace fsdp::test
