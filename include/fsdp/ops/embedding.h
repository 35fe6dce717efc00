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

using embedding_forward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
using embedding_backward_fn = void (*)(const Tensor&, const Tensor&, const Tensor&);
FSDP_DECLARE_DISPATCH(embedding_forward_fn, embedding_forward_stub);
FSDP_DECLARE_DISPATCH(embedding_backward_fn, embedding_backward_stub);

}  // namespace fsdp
