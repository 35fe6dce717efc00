// Token embedding: out[n, :] = table[ids[n], :].
//   ids: int32 or int64 [N]; table: [V, C] float; out: [N, C] packed rows, same dtype.
// An id outside [0, V) is an error naming the id, its position and V.
// Backward accumulates: dtable[ids[n], :] += dout[n, :], in a deterministic order (the
// same bits for any thread count), so repeated ids never race.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/core/dispatch.h"

namespace fsdp {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

// Vocabulary-parallel (tensor parallelism, model/vocab_parallel.h): `table` holds the rows
// [vocab_begin, vocab_begin + V_shard) of a vocabulary of vocab_size. out[n, :] =
// table[ids[n] - vocab_begin, :] for the ids in that range and zeros for the others
// (another rank's rows: the sum over the tensor group is the whole lookup); backward adds
// dout[n, :] into the rows in range only, in the same deterministic order. An id outside
// [0, vocab_size) is an error, as for the whole table.
void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out, int64_t vocab_begin,
                             int64_t vocab_size);
void embedding_shard_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t vocab_begin,
                              int64_t vocab_size);

using embedding_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
using embedding_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(embedding_forward_fn, embedding_forward_stub);
FSDP_DECLARE_DISPATCH(embedding_backward_fn, embedding_backward_stub);
using embedding_shard_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t);
FSDP_DECLARE_DISPATCH(embedding_shard_fn, embedding_shard_forward_stub);
FSDP_DECLARE_DISPATCH(embedding_shard_fn, embedding_shard_backward_stub);

}  // namespace fsdp
