// The vocabulary-parallel embedding and cross-entropy; see vocab_parallel.h.
#include "fsdp/model/vocab_parallel.h"

#include "fsdp/core/memory_category.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/ops/embedding.h"

namespace fsdp::model {

void vocab_parallel_embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_size, TensorGroup& group,
                                      const Tensor& partial, const Tensor& out) {
  embedding_shard_forward(ids, table, partial, int64_t(group.rank()) * table.size(0), vocab_size);
  group.reduce_scatter(partial, out);  // backward twin: the all-gather below
}

void vocab_parallel_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                       int64_t vocab_size, TensorGroup& group, const Tensor& full) {
  group.all_gather(dout, full);  // forward twin: the reduce-scatter above
  embedding_shard_backward(ids, full, dtable, int64_t(group.rank()) * dtable.size(0), vocab_size);
}

VocabParallelStats::VocabParallelStats(int64_t rows, int ranks, Device device) {
  const memory::CategoryScope tag("scratch/vocab-parallel cross-entropy");
  mine = Tensor::zeros({rows, 3}, DType::F64, device);
  all = Tensor::zeros({int64_t(ranks), rows, 3}, DType::F64, device);
}

void vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                  const Tensor& dlogits, double grad_scale, int64_t vocab_size, TensorGroup& group,
                                  VocabParallelStats& stats) {
  const int64_t begin = int64_t(group.rank()) * logits.size(1);
  cross_entropy_shard_stats(logits, targets, stats.mine, begin, vocab_size);
  group.all_gather(stats.mine, stats.all);
  cross_entropy_shard_finish(logits, targets, stats.all, losses, dlogits, grad_scale, begin);
}

}  // namespace fsdp::model
