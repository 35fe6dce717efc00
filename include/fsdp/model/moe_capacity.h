// Note [Expert capacity]
// moe.capacity_factor f > 0 bounds how many (token, choice) pairs an expert takes from one
// micro-batch: capacity = ceil(f x N x k / E) for a micro-batch of N tokens, k choices and E
// experts (Megatron-LM's moe_expert_capacity_factor, computed as it computes it, over the
// tokens routed at once). An expert chosen by more pairs keeps the `capacity` of them with
// the highest router probability (Megatron's 'probs' drop policy; ties to the lower token,
// then choice, index) and drops the rest: a dropped pair contributes nothing to its token's
// output (its expert output is zero; the kept pairs' weights are not renormalised, as in
// Megatron) and gets no gradient. The router losses and the expert counts are those of the
// routing before any drop, as Megatron computes its auxiliary loss.
//
// The capacity is a function of the micro-batch alone, never of the ranks: the same
// micro-batch drops the same pairs in one process and in any layout (an expert-parallel
// rank drops its own micro-batch's pairs before dispatch, tensor-parallel ranks route the
// same gathered micro-batch alike), so the drops, and the losses, are layout-independent.
//
// After the drop the sorted order holds every expert's kept pairs (their token order kept,
// each expert's group contiguous, offsets[E] = the kept count), then every dropped pair in
// flat order, so slot stays a permutation: the rows past the kept ones are the dropped pairs',
// which the experts never read and whose outputs are zero.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

// ceil(f x tokens x k / E), at least 1; 0 when cfg.capacity_factor is 0 (dropless).
int64_t expert_capacity(const LlamaConfig& cfg, int64_t tokens);

// Rewrites the sort of moe_permute_plan (order, slot [N k], offsets [E + 1], int32, on the
// host) so every expert keeps at most `capacity` pairs, chosen by probs [N, E] (the router's
// softmax, stat dtype) of expert [N, k]; returns the pairs dropped.
int64_t drop_over_capacity(const Tensor& probs, const Tensor& expert, int64_t capacity, const Tensor& order,
                           const Tensor& slot, const Tensor& offsets);

}  // namespace fsdp::model
