// The vocabulary split over a tensor group (model/tensor_parallel.h): the embedding lookup
// and the cross-entropy of the output head, each with its backward beside it. Rank t of T
// holds the rows [t * V/T, (t+1) * V/T) of the embedding table and of the head's weight
// (with tied embeddings the same rows: one split for both uses), and every rank of the
// group has the whole micro-batch's ids and targets.
//
//   embedding  forward:  partial = lookup of the ids in this rank's rows (zeros for the
//                        others') [N, C]; out = reduce-scatter(partial) [N/T, C]: this
//                        rank's rows of the residual stream (sequence parallelism)
//              backward: full = all-gather(dout) [N, C]; dtable += the rows of this rank's
//                        vocabulary
//   cross-entropy        logits [N, V/T] of this rank's vocabulary; per row the shard's
//                        (max, sum of exponentials, target logit) all-gathered over the
//                        group and merged (ops/cross_entropy.h): the loss on every rank,
//                        the gradient of this rank's logits, and the full logits never
//                        gathered.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/tensor_parallel.h"

namespace fsdp::model {

// ids [N] int32; table [V/T, C] this rank's rows of a vocabulary of vocab_size; partial
// [N, C] scratch; out [N/T, C].
void vocab_parallel_embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_size, TensorGroup& group,
                                      const Tensor& partial, const Tensor& out);
// dout [N/T, C] (this rank's rows); full [N, C] scratch; dtable [V/T, C] accumulated into.
void vocab_parallel_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                       int64_t vocab_size, TensorGroup& group, const Tensor& full);

// The [N, 3] and [T, N, 3] float64 scratch of the cross-entropy's statistics.
struct VocabParallelStats {
  Tensor mine, all;
  VocabParallelStats() = default;
  VocabParallelStats(int64_t rows, int ranks, Device device);
};

// logits [N, V/T] of this rank's vocabulary; targets [N]; losses [N] (the same on every
// rank of the group); dlogits (may be logits; undefined: forward only) = d(sum of losses *
// grad_scale) / d logits.
void vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                  const Tensor& dlogits, double grad_scale, int64_t vocab_size, TensorGroup& group,
                                  VocabParallelStats& stats);

}  // namespace fsdp::model
