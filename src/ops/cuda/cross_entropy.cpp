// The CUDA fused softmax cross-entropy (fsdp/ops/cross_entropy.h) registered into
// cross_entropy_stub, and its vocabulary-parallel halves into theirs: one kernel each; the
// whole op and the statistics also validate the targets into the device error record
// (raised with the CPU's message at the next read-back; Note [Device error record] in
// fsdp/core/cuda.h), so the host does not wait here.
#include "cross_entropy.cuh"

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/ops/cross_entropy.h"
#include "launch_args.h"

namespace fsdp {
namespace {

void cross_entropy_cuda(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& dlogits,
                        double grad_scale, int64_t ignore_index) {
  cuda::check_implemented("cross_entropy", logits.dtype(), cuda::cross_entropy_supports);
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  cuda::launch_cross_entropy(logits.dtype(), targets.dtype(), cuda::rows(logits), targets.data_ptr(),
                             losses.data_ptr(), cuda::rows(dlogits), n, v, grad_scale, ignore_index,
                             cuda::device_error_record(logits.device().index), cuda::stream_of(logits));
}

// Vocabulary-parallel halves (tensor parallelism): the statistics validate the targets
// against the whole vocabulary, as the CPU's do.
void cross_entropy_shard_stats_cuda(const Tensor& logits, const Tensor& targets, const Tensor& stats, int64_t begin,
                                    int64_t vocab, int64_t ignore_index) {
  cuda::check_implemented("cross_entropy_shard_stats", logits.dtype(), cuda::cross_entropy_supports);
  const int64_t n = logits.size(0);
  if (n == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  cuda::launch_cross_entropy_shard_stats(logits.dtype(), targets.dtype(), cuda::rows(logits), targets.data_ptr(),
                                         stats.data<double>(), n, logits.size(1), begin, vocab, ignore_index,
                                         cuda::device_error_record(logits.device().index), cuda::stream_of(logits));
}

void cross_entropy_shard_finish_cuda(const Tensor& logits, const Tensor& targets, const Tensor& all_stats,
                                     const Tensor& losses, const Tensor& dlogits, double grad_scale, int64_t begin,
                                     int64_t ignore_index) {
  cuda::check_implemented("cross_entropy_shard_finish", logits.dtype(), cuda::cross_entropy_supports);
  const int64_t n = logits.size(0);
  if (n == 0) return;
  cuda::DeviceGuard guard(logits.device().index);
  cuda::launch_cross_entropy_shard_finish(logits.dtype(), targets.dtype(), cuda::rows(logits), targets.data_ptr(),
                                          all_stats.data<double>(), all_stats.size(0), losses.data_ptr(),
                                          cuda::rows(dlogits), n, logits.size(1), grad_scale, begin, ignore_index,
                                          cuda::stream_of(logits));
}

}  // namespace

FSDP_REGISTER_DISPATCH(cross_entropy_stub, DeviceType::CUDA, &cross_entropy_cuda);
FSDP_REGISTER_DISPATCH(cross_entropy_shard_stats_stub, DeviceType::CUDA, &cross_entropy_shard_stats_cuda);
FSDP_REGISTER_DISPATCH(cross_entropy_shard_finish_stub, DeviceType::CUDA, &cross_entropy_shard_finish_cuda);

}  // namespace fsdp
