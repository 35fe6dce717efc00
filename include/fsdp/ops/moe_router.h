// The router of a sparse mixture of experts (Mixtral), as transformers 4.x's
// MixtralSparseMoeBlock routes, after the gate GEMM (logits = h W_router^T, a Linear):
//
//   probs_t  = softmax(logits_t)             in the stat dtype (float32; float64 for float64)
//   lse_t    = logsumexp(logits_t)
//   expert_t = the k largest probs, largest first (ties: the lower expert index first)
//   weight_tj = probs_t[expert_tj] / sum_i probs_t[expert_ti]     (renormalised over the k)
//
// With a routing bias ([E] float32, auxiliary-loss-free balancing, model/router_bias.h)
// the k experts are those with the largest probs_t[e] + bias[e] (the sum formed in double;
// same tie rule), while weight stays the unbiased probabilities of those experts,
// renormalised: the bias decides where a token goes, never how much of each expert it
// takes, so it carries no gradient. An undefined bias is the plain routing above, bit for
// bit.
//
// Shapes: logits [N, E] (packed rows, any float dtype), probs [N, E] stat dtype, lse [N]
// stat dtype, expert [N, k] int32, weight [N, k] stat dtype; all contiguous but logits;
// 1 <= k <= E. The CPU backend takes float32 and float64 logits (the reference); the CUDA
// one every float dtype and E <= 1024 (a thread per token), computing in double as the CPU.
//
// moe_router_stats sums what the load-balancing and z losses need over the tokens, in a
// fixed order (the same bits for any thread count): prob_sum [E] = sum_t probs_t,
// count [E] int32 = number of (t, j) with expert_tj = e, lse_sq_sum [1] = sum_t lse_t^2.
//
// moe_router_backward: per token, with S = sum_j probs[e_j], w the weights and the
// upstream dweight [N, k] (stat dtype; undefined = zero), aux_grad [E] (stat dtype; the
// same d loss / d probs[t, e] for every token; undefined = zero) and z_scale
// (d loss / d lse_t^2):
//   g_e      = aux_grad[e] + sum_{j: e_j = e} (dweight_j - sum_i dweight_i w_i) / S
//   dlogits  = probs * (g - sum_e probs_e g_e) + 2 z_scale lse probs
// computed in the stat dtype, rounded once into dlogits ([N, E], the logits' dtype,
// overwritten). No floating-point atomics on any backend.
#pragma once

#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

void moe_router_forward(const Tensor& logits, int64_t k, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                        const Tensor& weight, const Tensor& bias = Tensor());
void moe_router_stats(const Tensor& probs, const Tensor& expert, const Tensor& lse, const Tensor& prob_sum,
                      const Tensor& count, const Tensor& lse_sq_sum);
void moe_router_backward(const Tensor& dweight, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                         const Tensor& weight, const Tensor& aux_grad, double z_scale, const Tensor& dlogits);

using moe_router_forward_fn = void (*)(const Tensor&, int64_t, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&);
using moe_router_stats_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&);
using moe_router_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, double, const Tensor&);
FSDP_DECLARE_DISPATCH(moe_router_forward_fn, moe_router_forward_stub);
FSDP_DECLARE_DISPATCH(moe_router_stats_fn, moe_router_stats_stub);
FSDP_DECLARE_DISPATCH(moe_router_backward_fn, moe_router_backward_stub);

}  // namespace fsdp
