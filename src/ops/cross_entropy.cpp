// Front end of the fused softmax cross-entropy: validates every argument once for all
// backends, then dispatches on the device. Target range checks need the targets' values,
// which only the backend can read, so each backend reports those itself.
#include "fsdp/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(cross_entropy_stub);
FSDP_DEFINE_DISPATCH(cross_entropy_shard_stats_stub);
FSDP_DEFINE_DISPATCH(cross_entropy_shard_finish_stub);

namespace {

// Element offsets [first, last] a strided view can touch (strides here are >= 0).
std::pair<int64_t, int64_t> extent(const Tensor& t) {
  int64_t last = t.offset();
  for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {t.offset(), last};
}

// The kernel reads a logit and then writes its gradient at the same index, so dlogits may
// be logits itself; any other overlap would read already-overwritten values.
void check_alias(const Tensor& logits, const Tensor& dlogits) {
  if (logits.storage() == nullptr || logits.storage() != dlogits.storage() || logits.numel() == 0) return;
  if (logits.offset() == dlogits.offset() && logits.strides() == dlogits.strides()) return;
  const auto [a0, a1] = extent(logits);
  const auto [b0, b1] = extent(dlogits);
  FSDP_CHECK(a1 < b0 || b1 < a0,
             "dlogits must either be logits itself or not overlap it (logits offset {} strides {}, dlogits offset "
             "{} strides {})",
             logits.offset(), logits.strides().str(), dlogits.offset(), dlogits.strides().str());
}

void check_common(const Tensor& logits, const Tensor& targets, const Tensor& losses) {
  detail::check_float_rows(logits, "logits");
  check_defined(targets, "targets");
  FSDP_CHECK(targets.dtype() == DType::I32 || targets.dtype() == DType::I64,
             "targets must be int32 or int64, got {}", targets.str());
  check_shape(targets, Dims{logits.size(0)}, "targets");
  check_contiguous(targets, "targets");
  check_same_device(targets, logits, "targets", "logits");
  check_dtype(losses, stat_dtype(logits.dtype()), "losses");
  check_shape(losses, Dims{logits.size(0)}, "losses");
  check_contiguous(losses, "losses");
  check_same_device(losses, logits, "losses", "logits");
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                           int64_t ignore_index) {
  check_common(logits, targets, losses);
  cross_entropy_stub(logits.device(), logits, targets, losses, Tensor(), 1.0, ignore_index);
}

void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                                    const Tensor& dlogits, double grad_scale, int64_t ignore_index) {
  check_common(logits, targets, losses);
  check_shape(dlogits, logits.sizes(), "dlogits");
  check_same_dtype(dlogits, logits, "dlogits", "logits");
  check_rows_packed(dlogits, "dlogits");
  check_same_device(dlogits, logits, "dlogits", "logits");
  check_alias(logits, dlogits);
  FSDP_CHECK(std::isfinite(grad_scale), "grad_scale must be finite, got {}", grad_scale);
  cross_entropy_stub(logits.device(), logits, targets, losses, dlogits, grad_scale, ignore_index);
}

void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& stats, int64_t vocab_begin,
                               int64_t vocab_size, int64_t ignore_index) {
  detail::check_float_rows(logits, "logits");
  check_defined(targets, "targets");
  FSDP_CHECK(targets.dtype() == DType::I32 || targets.dtype() == DType::I64,
             "targets must be int32 or int64, got {}", targets.str());
  check_shape(targets, Dims{logits.size(0)}, "targets");
  check_contiguous(targets, "targets");
  check_same_device(targets, logits, "targets", "logits");
  check_dtype(stats, DType::F64, "stats");
  check_shape(stats, Dims{logits.size(0), 3}, "stats");
  check_contiguous(stats, "stats");
  check_same_device(stats, logits, "stats", "logits");
  FSDP_CHECK(vocab_begin >= 0 && vocab_begin + logits.size(1) <= vocab_size,
             "the logits' vocabulary rows [{}, {}) are not inside the vocabulary [0, {})", vocab_begin,
             vocab_begin + logits.size(1), vocab_size);
  cross_entropy_shard_stats_stub(logits.device(), logits, targets, stats, vocab_begin, vocab_size, ignore_index);
}

void cross_entropy_shard_finish(const Tensor& logits, const Tensor& targets, const Tensor& all_stats,
                                const Tensor& losses, const Tensor& dlogits, double grad_scale, int64_t vocab_begin,
                                int64_t ignore_index) {
  check_common(logits, targets, losses);
  check_dtype(all_stats, DType::F64, "all_stats");
  check_dim(all_stats, 3, "all_stats");
  FSDP_CHECK(all_stats.size(0) >= 1 && all_stats.size(1) == logits.size(0) && all_stats.size(2) == 3,
             "all_stats must be [ranks, {}, 3], got {}", logits.size(0), all_stats.str());
  check_contiguous(all_stats, "all_stats");
  check_same_device(all_stats, logits, "all_stats", "logits");
  FSDP_CHECK(vocab_begin >= 0, "vocab_begin must be >= 0, got {}", vocab_begin);
  if (dlogits.defined()) {
    check_shape(dlogits, logits.sizes(), "dlogits");
    check_same_dtype(dlogits, logits, "dlogits", "logits");
    check_rows_packed(dlogits, "dlogits");
    check_same_device(dlogits, logits, "dlogits", "logits");
    check_alias(logits, dlogits);
  }
  FSDP_CHECK(std::isfinite(grad_scale), "grad_scale must be finite, got {}", grad_scale);
  cross_entropy_shard_finish_stub(logits.device(), logits, targets, all_stats, losses, dlogits, grad_scale,
                                  vocab_begin, ignore_index);
}

}  // namespace fsdp
