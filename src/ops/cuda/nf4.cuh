// Launcher of the NF4 dequantization kernel (nf4.cu), called by nf4.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

// One NF4 weight's pieces as device pointers (fsdp/ops/nf4.h's Nf4Tensors).
struct Nf4View {
  const uint8_t* packed;
  const uint8_t* absmax;
  const float* nested_absmax;
  const float* nested_code;
  const float* offset;
  const float* code;
  const float* block_absmax;  // a slice's absmax' per block (the others null), or null
};

bool nf4_dequantize_supports(DType out);  // float32, float64, bfloat16, float16
// out[0, numel) = the weight, each value rounded to value_dtype, then stored as `out_dtype`.
void launch_nf4_dequantize(DType out_dtype, DType value_dtype, const Nf4View& w, void* out, int64_t numel,
                           cudaStream_t stream);

}  // namespace fsdp::cuda
