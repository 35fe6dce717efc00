// Note [Sequence parallelism]
// Between the matrices of a block, the T ranks of a tensor group each hold N / T of the
// micro-batch's N token rows (rows [t * N/T, (t+1) * N/T) of the [N, C] residual stream):
// the norms and the residual adds run on those rows, and the matrices on all of them
// (Megatron-LM's sequence parallelism; its core/tensor_parallel/mappings.py). Two
// mappings join the two, each a forward collective with its backward twin:
//
//   gather   (gather_from_sequence_parallel_region) before a column-parallel Linear:
//            forward   h [N, C]  = all-gather of this rank's rows of the normed input
//            backward  dh rows   = reduce-scatter of the Linear's partial dx [N, C]
//   scatter  (reduce_scatter_to_sequence_parallel_region) after a row-parallel Linear:
//            forward   out rows  = x rows + reduce-scatter of the partial sums [N, C]
//            backward  dy [N, C] = all-gather of d(out) rows
//
// so a sublayer is  out = x + scatter(Linear_row(f(Linear_col(gather(norm(x))))))  and
// its backward runs the twins in reverse. A column-parallel Linear's backward needs its
// input again (dW += dy^T h): it is gathered a second time rather than kept, so the
// activations a block keeps stay sharded over the tensor group (Megatron does the same).
// Both [N, C] buffers are the pass's scratch (LlamaActivations::tp_gathered, tp_partial),
// shared by every block, the embedding and the head, which run one at a time.
//
// Without tensor parallelism (no group, or a group of one) every mapping is the plain
// single-rank computation, with the same bits as before tensor parallelism existed: the
// residual add stays folded into the row Linear's GEMM (beta = 1).
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/model/linear.h"
#include "fsdp/model/tensor_parallel.h"
#include "fsdp/model/unit_params.h"
#include "fsdp/model/vocab_parallel.h"

namespace fsdp::model {

class SequenceParallel;
// No tensor parallelism: what a sublayer built without a SequenceParallel uses.
extern const SequenceParallel kNoSequenceParallel;

class SequenceParallel {
 public:
  explicit SequenceParallel(TensorGroup* group = nullptr) : group_(group) {}

  // Tensor parallelism is on: a group of more than one rank.
  bool on() const { return group_ != nullptr && group_->size() > 1; }
  int size() const { return on() ? group_->size() : 1; }
  int rank() const { return on() ? group_->rank() : 0; }
  TensorGroup& group() const;

  // This pass's scratch: two [N, C] buffers and the cross-entropy's statistics (unused
  // when off).
  void use(const Tensor& gathered, const Tensor& partial, VocabParallelStats* stats);
  VocabParallelStats& stats() const;

  // gather's forward: the rows [n/T, C] of every rank stacked into the gathered buffer
  // [n, C] (returned); `rows` itself when off.
  Tensor gather(const Tensor& rows) const;
  // gather's backward: `rows` [n/T, C] = this rank's rows of the sum over the group of
  // `full` [n, C] (what partial_for handed out); nothing when off (full is rows).
  void gather_backward(const Tensor& full, const Tensor& rows) const;
  // Where a Linear writes a result that gather_backward (or scatter) reduces: the partial
  // buffer [n, C] for `rows` [n/T, C], or rows itself when off.
  Tensor partial_for(const Tensor& rows) const;
  // The gathered buffer [n, C] for `rows` [n/T, C] as scratch, untouched (the vocabulary-
  // parallel embedding gathers into it itself); rows itself when off.
  Tensor gathered_for(const Tensor& rows) const;

  // scatter's forward after a row-parallel Linear: out = x + lin(in), with out and x this
  // rank's rows [n/T, C] and in all n rows. out may be x.
  void scatter(const Linear& lin, const Tensor& in, const UnitParams& p, const Tensor& x, const Tensor& out) const;
  // scatter's forward for partial sums computed by other than one Linear (the experts'
  // combine, mlp_moe.h): out = x + this rank's rows of the sum over the group of `partial`
  // [n, C] (partial_for(out)). Needs on(); out must not be x.
  void scatter_sum(const Tensor& partial, const Tensor& x, const Tensor& out) const;
  // scatter's backward: d(out) rows [n/T, C] all-gathered into [n, C] (the gathered
  // buffer), or dout itself when off.
  Tensor scatter_backward(const Tensor& dout) const { return gather(dout); }

 private:
  TensorGroup* group_ = nullptr;
  Tensor gathered_, partial_;
  VocabParallelStats* stats_ = nullptr;
};

}  // namespace fsdp::model
