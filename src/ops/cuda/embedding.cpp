// The CUDA embedding (fsdp/ops/embedding.h) registered into its dispatch stubs. The kernels
// check the ids against the vocabulary as they go and record a bad one in the device error
// record, which the next read-back raises with the CPU's message (Note [Device error
// record] in fsdp/core/cuda.h): no wait of the host here.
#include "embedding.cuh"

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/embedding.h"
#include "launch_args.h"

namespace fsdp {
namespace {

cuda::EmbeddingIds checked_ids(const Tensor& ids, int64_t vocab, int device) {
  return cuda::EmbeddingIds{ids.data_ptr(), ids.dtype(), ids.numel(), vocab, cuda::device_error_record(device)};
}

void embedding_forward_cuda(const Tensor& ids, const Tensor& table, const Tensor& out) {
  cuda::check_implemented("embedding_forward", table.dtype(), cuda::embedding_supports);
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(table.device().index);
  cuda::launch_embedding_forward(table.dtype(), checked_ids(ids, table.size(0), table.device().index),
                                 cuda::rows(table), cuda::rows(out), table.size(1), cuda::stream_of(table));
}

void embedding_backward_cuda(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  cuda::check_implemented("embedding_backward", dtable.dtype(), cuda::embedding_supports);
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(dtable.device().index);
  cuda::launch_embedding_backward(dtable.dtype(), checked_ids(ids, dtable.size(0), dtable.device().index),
                                  cuda::rows(dout), cuda::rows(dtable), dtable.size(1),
                                  cuda::stream_of(dtable));
}

}  // namespace

FSDP_REGISTER_DISPATCH(embedding_forward_stub, DeviceType::CUDA, &embedding_forward_cuda);
FSDP_REGISTER_DISPATCH(embedding_backward_stub, DeviceType::CUDA, &embedding_backward_cuda);

}  // namespace fsdp
