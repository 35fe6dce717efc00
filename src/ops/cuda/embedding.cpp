// The CUDA embedding (fsdp/ops/embedding.h) registered into its dispatch stubs: ids are
// checked against the vocabulary first (the CPU's message), then the kernels run.
#include "embedding.cuh"

#include "fsdp/core/cuda.h"
#include "fsdp/ops/embedding.h"

namespace fsdp {
namespace {

cuda::RowsView rows(const Tensor& t) { return cuda::RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)}; }

void check_ids(const Tensor& ids, int64_t vocab, cudaStream_t s) {
  const cuda::BadId bad = cuda::find_bad_id(ids.dtype(), ids.data_ptr(), ids.numel(), vocab, s);
  FSDP_CHECK(bad.position < 0, "token id {} at position {} is outside the vocabulary [0, {})", bad.id, bad.position,
             vocab);
}

void embedding_forward_cuda(const Tensor& ids, const Tensor& table, const Tensor& out) {
  FSDP_CHECK(cuda::embedding_supports(table.dtype()), "embedding_forward: dtype {} is not implemented on the CUDA backend",
             dtype_name(table.dtype()));
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(table.device().index);
  auto* s = static_cast<cudaStream_t>(cuda::current_stream(table.device().index));
  check_ids(ids, table.size(0), s);
  if (table.size(1) == 0) return;
  cuda::launch_embedding_forward(table.dtype(), ids.dtype(), ids.data_ptr(), rows(table), rows(out), ids.numel(),
                                 table.size(1), s);
}

void embedding_backward_cuda(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  FSDP_CHECK(cuda::embedding_supports(dtable.dtype()),
             "embedding_backward: dtype {} is not implemented on the CUDA backend", dtype_name(dtable.dtype()));
  if (ids.numel() == 0) return;
  cuda::DeviceGuard guard(dtable.device().index);
  auto* s = static_cast<cudaStream_t>(cuda::current_stream(dtable.device().index));
  check_ids(ids, dtable.size(0), s);
  if (dtable.size(1) == 0) return;
  cuda::launch_embedding_backward(dtable.dtype(), ids.dtype(), ids.data_ptr(), rows(dout), rows(dtable), ids.numel(),
                                  dtable.size(1), s);
}

}  // namespace

FSDP_REGISTER_DISPATCH(embedding_forward_stub, DeviceType::CUDA, &embedding_forward_cuda);
FSDP_REGISTER_DISPATCH(embedding_backward_stub, DeviceType::CUDA, &embedding_backward_cuda);

}  // namespace fsdp
