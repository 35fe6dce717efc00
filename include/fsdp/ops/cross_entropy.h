// Softmax cross-entropy over the vocabulary, fused with its gradient (as llm.c does), so
// the logits buffer can receive its own gradient in place and no second [N, V] tensor
// exists.
//   logits: [N, V] packed rows, float; targets: [N] int32 / int64; a target equal to
//   ignore_index contributes no loss and a zero gradient row; any other target outside
//   [0, V) is an error naming the row and the value.
//   losses: [N] float32 (float64 for float64 logits): -log softmax(logits[n])[target[n]],
//   0 for ignored rows. The caller sums them (the trainer in double) and chooses the scale.
//   dlogits (may alias logits): (softmax(logits[n]) - onehot(target[n])) * grad_scale.
// The forward-only variant (evaluation) leaves the logits untouched.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

constexpr int64_t kIgnoreIndex = -100;  // PyTorch's and Hugging Face's default

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           int64_t ignore_index = kIgnoreIndex);
void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                    const Tensor& dlogits, double grad_scale, int64_t ignore_index = kIgnoreIndex);

// Vocabulary-parallel cross-entropy (tensor parallelism; Megatron's
// vocab_parallel_cross_entropy; model/vocab_parallel.h runs it): each of T ranks holds
// logits [N, V_shard] for the vocabulary rows [vocab_begin, vocab_begin + V_shard) of
// vocab_size, and the full logits are never gathered. Two halves around one all-gather of
// [N, 3] float64 statistics over the tensor group:
//   cross_entropy_shard_stats:  stats[n] = (m, s, x_t): this shard's max logit m, the sum
//     of exp(x - m) over its logits (in double), and the target's logit when the target is
//     one of this shard's rows (0 otherwise). Ignored rows: (0, 1, 0). A target outside
//     [0, vocab_size) that is not ignore_index is an error naming the row.
//   cross_entropy_shard_finish: from every rank's stats [T, N, 3] (rank order), per row
//     M = max_r m_r, S = sum_r s_r exp(m_r - M) (the online-softmax merge) and x_t =
//     sum_r x_t,r, so loss = log S + M - x_t, the same bits on every rank; dlogits (may
//     alias logits; undefined: forward only) = (exp(x - M) / S - onehot(target)) *
//     grad_scale on this rank's columns. Ignored rows: loss 0 and zero gradient.
// One all-gather of the three statistics instead of Megatron's three all-reduces (max, then
// target logit and sum of exponentials): one collective on the critical path, and the max
// is merged exactly in a fixed order.
void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& stats, int64_t vocab_begin,
                               int64_t vocab_size, int64_t ignore_index = kIgnoreIndex);
void cross_entropy_shard_finish(const Tensor& logits, const Tensor& targets, const Tensor& all_stats,
                                const Tensor& losses, const Tensor& dlogits, double grad_scale, int64_t vocab_begin,
                                int64_t ignore_index = kIgnoreIndex);

// dlogits undefined => forward only.
using cross_entropy_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, int64_t);
FSDP_DECLARE_DISPATCH(cross_entropy_fn, cross_entropy_stub);
using cross_entropy_shard_stats_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t);
FSDP_DECLARE_DISPATCH(cross_entropy_shard_stats_fn, cross_entropy_shard_stats_stub);
using cross_entropy_shard_finish_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, double, int64_t, int64_t);
FSDP_DECLARE_DISPATCH(cross_entropy_shard_finish_fn, cross_entropy_shard_finish_stub);

}  // namespace fsdp
