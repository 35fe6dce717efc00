// Launcher of the fused AdamW kernel (adamw.cu), called by adamw.cpp. Raw pointers and
// the per-step scalars PyTorch forms on the host (see adamw.cu); no fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

struct AdamWScalars {
  double decay;      // 1 - lr * weight_decay
  double step_size;  // lr / (1 - beta1^t)
  double bc2_sqrt;   // sqrt(1 - beta2^t)
  double beta1, beta2, eps, grad_scale;
};

// t: float32 or float64; param, grad, exp_avg, exp_avg_sq: n elements each.
void launch_adamw(DType t, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream);

}  // namespace fsdp::cuda
