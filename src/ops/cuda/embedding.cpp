// The CUDA embedding (fsdp/ops/embedding.h), whole table and vocabulary shard, registered
// into its dispatch stubs. The kernels check the ids against the vocabulary as they go and
// record a bad one in the device error record, which the next read-back raises with the
// CPU's message (Note [Device error record] in fsdp/core/cuda.h): no wait of the host here.
#include "embedding.cuh"

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/embedding.h"
#include "launch_args.h"

namespace fsdp {
namespace {

// ids into the table `table` holding the vocabulary rows [begin, begin + table rows) of
// `vocab`; `op` names the op in an error.
cuda::EmbeddingIds checked_ids(const Tensor& ids, const Tensor& table, int64_t begin, int64_t vocab,
                               cuda::DeviceErrorOp op) {
  return cuda::EmbeddingIds{ids.data_ptr(), ids.dtype(), ids.numel(), vocab,
                            cuda::device_error_record(table.device().index), begin, table.size(0), op};
}

void shard_forward(const char* name, const Tensor& ids, const Tensor& table, const Tensor& out, int64_t begin,
                   int64_t vocab, cuda::DeviceErrorOp op) {
  cuda::check_implemented(name, table.dtype(), cuda::embedding_supports);
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(table.device().index);
  cuda::launch_embedding_forward(table.dtype(), checked_ids(ids, table, begin, vocab, op), cuda::rows(table),
                                 cuda::rows(out), table.size(1), cuda::stream_of(table));
}

void shard_backward(const char* name, const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t begin,
                    int64_t vocab, cuda::DeviceErrorOp op) {
  cuda::check_implemented(name, dtable.dtype(), cuda::embedding_supports);
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(dtable.device().index);
  cuda::launch_embedding_backward(dtable.dtype(), checked_ids(ids, dtable, begin, vocab, op), cuda::rows(dout),
                                  cuda::rows(dtable), dtable.size(1), cuda::stream_of(dtable));
}

void embedding_forward_cuda(const Tensor& ids, const Tensor& table, const Tensor& out) {
  shard_forward("embedding_forward", ids, table, out, 0, table.size(0), cuda::DeviceErrorOp::EmbeddingForward);
}

void embedding_backward_cuda(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  shard_backward("embedding_backward", ids, dout, dtable, 0, dtable.size(0), cuda::DeviceErrorOp::EmbeddingBackward);
}

// Vocabulary-parallel (tensor parallelism): the same kernels on this rank's rows.
void embedding_shard_forward_cuda(const Tensor& ids, const Tensor& table, const Tensor& out, int64_t begin,
                                  int64_t vocab) {
  shard_forward("embedding_shard_forward", ids, table, out, begin, vocab, cuda::DeviceErrorOp::EmbeddingShardForward);
}

void embedding_shard_backward_cuda(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t begin,
                                   int64_t vocab) {
  shard_backward("embedding_shard_backward", ids, dout, dtable, begin, vocab,
                 cuda::DeviceErrorOp::EmbeddingShardBackward);
}

}  // namespace

FSDP_REGISTER_DISPATCH(embedding_forward_stub, DeviceType::CUDA, &embedding_forward_cuda);
FSDP_REGISTER_DISPATCH(embedding_backward_stub, DeviceType::CUDA, &embedding_backward_cuda);
FSDP_REGISTER_DISPATCH(embedding_shard_forward_stub, DeviceType::CUDA, &embedding_shard_forward_cuda);
FSDP_REGISTER_DISPATCH(embedding_shard_backward_stub, DeviceType::CUDA, &embedding_shard_backward_cuda);

}  // namespace fsdp
