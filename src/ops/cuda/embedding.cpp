// The CUDA embedding (fsdp/ops/embedding.h) registered into its dispatch stubs. The kernels
// check the ids against the vocabulary as they go and record a bad one in the device error
// record, which the next read-back raises with the CPU's message (Note [Device error
// record] in fsdp/core/cuda.h): no wait of the host here.
#include "embedding.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/embedding.h"

namespace fsdp {
namespace {

cuda::RowsView rows(const Tensor& t) { return cuda::RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)}; }

cuda::EmbeddingIds checked_ids(const Tensor& ids, int64_t vocab, int device) {
  return cuda::EmbeddingIds{ids.data_ptr(), ids.dtype(), ids.numel(), vocab, cuda::device_error_record(device)};
}

void embedding_forward_cuda(const Tensor& ids, const Tensor& table, const Tensor& out) {
  FSDP_CHECK(cuda::embedding_supports(table.dtype()), "embedding_forward: dtype {} is not implemented on the CUDA backend",
             dtype_name(table.dtype()));
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(table.device().index);
  auto* s = static_cast<cudaStream_t>(cuda::current_stream(table.device().index));
  cuda::launch_embedding_forward(table.dtype(), checked_ids(ids, table.size(0), table.device().index), rows(table),
                                 rows(out), table.size(1), s);
}

void embedding_backward_cuda(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  FSDP_CHECK(cuda::embedding_supports(dtable.dtype()),
             "embedding_backward: dtype {} is not implemented on the CUDA backend", dtype_name(dtable.dtype()));
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(dtable.device().index);
  auto* s = static_cast<cudaStream_t>(cuda::current_stream(dtable.device().index));
  cuda::launch_embedding_backward(dtable.dtype(), checked_ids(ids, dtable.size(0), dtable.device().index), rows(dout),
                                  rows(dtable), dtable.size(1), s);
}

}  // namespace

FSDP_REGISTER_DISPATCH(embedding_forward_stub, DeviceType::CUDA, &embedding_forward_cuda);
FSDP_REGISTER_DISPATCH(embedding_backward_stub, DeviceType::CUDA, &embedding_backward_cuda);

}  // namespace fsdp
