// Inverted dropout with a counter-based mask (PyTorch's nn.Dropout in training mode, with
// our random stream instead of torch's):
//   forward:   out[i, j] = keep(i, j) ? x[i, j] / (1 - p) : 0
//   backward:  dx[i, j] (+)= keep(i, j) ? dout[i, j] / (1 - p) : 0
//   keep(i, j) = u(key, row0 + i, col0 + j) >= p,  u uniform in [0, 1) with 53 bits:
//                splitmix64(mix_key(mix_key(key, row0 + i), col0 + j)) >> 11 against p * 2^53
// The mask is a pure function of (key, global row, column): the backward, an activation-
// checkpointing recompute, another rank or another backend draw exactly the same one, and
// nothing is stored between forward and backward. row0 places the rows in a larger order
// (LoRA numbers a micro-batch's rows by their global sample position, so N ranks drop what
// one process dropping over the same global batch drops); col0 places the columns likewise
// (a tensor-parallel rank's slice of the features: LoRA on a row-parallel weight).
//   x, out, dout, dx: [N, C] packed rows, same float dtype; 0 <= p < 1 (p = 0 copies).
// 1 / (1 - p) is applied as one multiply in the compute type (float, or double for float64).
#pragma once

#include <cstdint>

#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

void dropout_forward(const Tensor& x, const Tensor& out, double p, uint64_t key, int64_t row0, int64_t col0 = 0);
void dropout_backward(const Tensor& dout, const Tensor& dx, double p, uint64_t key, int64_t row0, bool accumulate,
                      int64_t col0 = 0);

// The mask's rule, for tests and for the backends: keep iff bits(key, row, col) >> 11 >= threshold.
uint64_t dropout_threshold(double p);  // ceil(p * 2^53)
bool dropout_keeps(uint64_t key, int64_t row, int64_t col, uint64_t threshold);

// The arguments every backend gets: the threshold and the scale are computed once here.
struct DropoutArgs {
  uint64_t key = 0;
  int64_t row0 = 0;
  int64_t col0 = 0;
  uint64_t threshold = 0;
  double scale = 1;  // 1 / (1 - p)
};
using dropout_forward_fn = void (*)(const Tensor&, const Tensor&, const DropoutArgs&);
using dropout_backward_fn = void (*)(const Tensor&, const Tensor&, const DropoutArgs&, bool);
FSDP_DECLARE_DISPATCH(dropout_forward_fn, dropout_forward_stub);
FSDP_DECLARE_DISPATCH(dropout_backward_fn, dropout_backward_stub);

}  // namespace fsdp
