// Launchers of the MoE router kernels (moe_router.cu), called by moe_router.cpp. Shapes as
// fsdp/ops/moe_router.h: logits [n, e] with row stride `logits_stride`, everything else
// contiguous; S is the stat dtype (float32, float64 for float64 logits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"

namespace fsdp::cuda {

constexpr int64_t kMoeRouterMaxExperts = 1024;

bool moe_router_supports(DType t);  // float32, float64, bfloat16, float16 logits
// bias: [e] float32 added to the probabilities for the top-k choice only, or null.
void launch_moe_router_forward(DType t, const void* logits, int64_t logits_stride, int64_t n, int64_t e, int64_t k,
                               const float* bias, void* probs, void* lse, int32_t* expert, void* weight,
                               cudaStream_t stream);
void launch_moe_router_stats(DType stat, const void* probs, const int32_t* expert, const void* lse, int64_t n,
                             int64_t e, int64_t k, void* prob_sum, int32_t* count, void* lse_sq_sum,
                             cudaStream_t stream);
void launch_moe_router_backward(DType t, const void* dweight, const void* probs, const void* lse,
                                const int32_t* expert, const void* weight, const void* aux_grad, double z_scale,
                                void* dlogits, int64_t dlogits_stride, int64_t n, int64_t e, int64_t k,
                                cudaStream_t stream);

}  // namespace fsdp::cuda
