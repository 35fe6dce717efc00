// Tensor parallelism as the model sees it (Megatron-LM's tensor and sequence parallelism,
// torchtitan's apply_tp): the T ranks of a tensor group each hold a slice of every block's
// matrices and of the vocabulary, and a 1/T share of each micro-batch's tokens between the
// matrices.
//
// Which weight is split how (param_units.cpp lays the slices out; See Note [Tensor
// parallel layout] there):
//   column-parallel (rows of W [out, in] split: each rank computes its share of the
//     outputs): q, k, v (whole heads; a GQA group stays on one rank), gate, up, each
//     expert's w1 and w3, the output head and the embedding table (the vocabulary)
//   row-parallel (columns split: each rank's outputs are partial sums): o, down, each
//     expert's w2
//   replicated: the norm weights and the router, whose gradients are partial sums over
//     the tensor group (each rank sees only its tokens) and are all-reduced by the engine
// Sequence parallelism between the matrices: activations of the residual stream are
// [N / T, C] (this rank's rows of the micro-batch's N tokens), all-gathered before a
// column-parallel GEMM and reduce-scattered after a row-parallel one, each forward
// collective with its backward twin (model/sequence_parallel.h).
//
// The model never sees ranks: it talks to its group through TensorGroup, which the engine's
// side implements over a communicator (fsdp/tensor_group.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

// The collectives tensor parallelism needs, over the T ranks of this rank's tensor group
// (rank order = slice order). Blocking: each returns once its output may be read. Rows
// are the first dimension of contiguous tensors.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // full [T * n, ...] = the ranks' shards [n, ...] stacked in rank order.
  virtual void all_gather(const Tensor& shard, const Tensor& full) = 0;
  // shard [n, ...] = sum over ranks of rows [rank * n, (rank + 1) * n) of full [T * n, ...].
  virtual void reduce_scatter(const Tensor& full, const Tensor& shard) = 0;
  // x = sum over ranks of x, in place.
  virtual void all_reduce(const Tensor& x) = 0;
};

// Why `cfg` cannot be split over `tensor` ranks with sequences of `seq_len` tokens: the
// first of heads, key/value heads (whole GQA groups per rank, as torchtitan requires),
// the MLP width, the vocabulary (split evenly: no padding rows are added) and the
// sequence (sequence parallelism) that `tensor` does not divide, as a sentence naming the
// model key and what would fit; nullopt when it can. seq_len 0: not checked.
std::optional<std::string> tensor_parallel_problem(const LlamaConfig& cfg, int64_t tensor, int64_t seq_len = 0);

}  // namespace fsdp::model
