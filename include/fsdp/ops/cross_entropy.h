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

// dlogits undefined => forward only.
using cross_entropy_fn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, int64_t);
FSDP_DECLARE_DISPATCH(cross_entropy_fn, cross_entropy_stub);

}  // namespace fsdp
