// The engine's memory from the units' shapes; see engine_memory.h. PoolReplay follows
// fsdp_engine.cpp hook by hook (acquire/release instead of the buffers themselves): keep
// the two in step.
#include "fsdp/fsdp/engine_memory.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace fsdp {
namespace {

// The engine's buffer pool over one step of a model of `units` units, counting the
// buffers of each dtype in use at once.
class PoolReplay {
 public:
  PoolReplay(int units, const FsdpOptions& o, bool direct)
      : units_(units), o_(o), direct_(direct), full_(size_t(units)), pending_(size_t(units)), staging_(size_t(units)),
        full_grad_(size_t(units)), reducing_(size_t(units)), send_(size_t(units)) {}

  // A training step: micro-batches in the order Llama::enqueue_forward_backward calls
  // the hooks (embedding and blocks forward; the head forward and backward back to back;
  // blocks and embedding backward; finish), gradients reduced on the last.
  std::map<DType, double> step(int accum) {
    for (int a = 0; a < accum; ++a) {
      sync_ = a == accum - 1;
      const int h = units_ - 1;
      for (int u = 0; u < h; ++u) before_forward(u), after_forward(u);
      before_forward(h), after_forward(h);
      for (int u = h; u >= 0; --u) before_backward(u), grads(u), after_backward(u);
      finish();
    }
    return peak_;
  }

 private:
  void acquire(DType t) { peak_[t] = std::max(peak_[t], double(++in_use_[t])); }
  void release(DType t) { --in_use_[t]; }
  bool staged() const { return o_.param_dtype != o_.compute_dtype; }

  void issue_gather(int v) {
    if (direct_ || v < 0 || v >= units_ || full_[v] || pending_[v]) return;
    full_[v] = true, acquire(o_.compute_dtype);
    if (staged()) staging_[v] = true, acquire(o_.param_dtype);
    pending_[v] = true;
  }
  void wait_gather(int u) {
    if (direct_) return;
    if (!full_[u] && !pending_[u]) issue_gather(u);
    if (!pending_[u]) return;
    pending_[u] = false;
    if (staging_[u]) staging_[u] = false, release(o_.param_dtype);
  }
  void release_full(int u) {
    if (full_[u]) full_[u] = false, release(o_.compute_dtype);
  }
  void before_forward(int u) {
    wait_gather(u);
    for (int k = 1; k <= o_.prefetch_limit; ++k) issue_gather(u + k);
  }
  void after_forward(int u) {
    if (!direct_ && o_.strategy == ShardingStrategy::FULL_SHARD && u != units_ - 1) release_full(u);
  }
  void before_backward(int u) {
    wait_gather(u);
    for (int k = 1; k <= o_.prefetch_limit; ++k) issue_gather(u - k);
  }
  void grads(int u) {
    if (!direct_ && !full_grad_[u]) full_grad_[u] = true, acquire(o_.compute_dtype);
  }
  void after_backward(int u) {
    if (!direct_) release_full(u);
    if (!sync_) return;
    if (!direct_) {
      if (o_.reduce_dtype != o_.compute_dtype) send_[u] = true, acquire(o_.reduce_dtype);
      reducing_[u] = true;
    }
    if (u + 1 < units_) complete_reduce(u + 1);
  }
  void complete_reduce(int u) {
    if (!reducing_[u]) return;
    reducing_[u] = false;
    if (send_[u]) send_[u] = false, release(o_.reduce_dtype);
    full_grad_[u] = false, release(o_.compute_dtype);
  }
  void finish() {
    for (int u = units_ - 1; u >= 0; --u) complete_reduce(u);
    for (int u = 0; u < units_; ++u) {
      if (pending_[u]) wait_gather(u);
      release_full(u);
    }
  }

  int units_;
  FsdpOptions o_;
  bool direct_;
  bool sync_ = true;
  std::vector<char> full_, pending_, staging_, full_grad_, reducing_, send_;
  std::map<DType, int> in_use_;
  std::map<DType, double> peak_;
};

double padded(double numel, int n) { return std::max(1.0, std::ceil(numel / n)) * n; }

}  // namespace

EngineMemory engine_memory(const std::vector<UnitShape>& units, int n, const FsdpOptions& o, int accum) {
  EngineMemory m;
  double total_units = 0, max_padded = 0;
  for (const UnitShape& u : units) {
    const double shard = padded(u.numel, n) / n;
    total_units += u.count;
    max_padded = std::max(max_padded, padded(u.numel, n));
    m.master += u.count * shard * 4;
    if (o.param_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.param_dtype));
    if (o.reduce_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.reduce_dtype));
  }
  m.grads = m.master;
  m.moments = 2 * m.master;
  const bool direct = n == 1 && o.param_dtype == DType::F32 && o.reduce_dtype == DType::F32 &&
                      o.compute_dtype == DType::F32;
  if (direct) return m;

  // Replay a few units past the prefetch window, then extend by the per-unit growth.
  const int small = o.prefetch_limit + 6, replayed = int(std::min<double>(total_units, small));
  const int a = std::min(accum, 3);  // two or more micro-batches all behave alike
  std::map<DType, double> peak = PoolReplay(replayed, o, false).step(a);
  std::map<DType, double> sync_peak = PoolReplay(replayed, o, false).step(1);
  if (total_units > replayed) {
    const std::map<DType, double> next = PoolReplay(replayed + 1, o, false).step(a);
    const std::map<DType, double> sync_next = PoolReplay(replayed + 1, o, false).step(1);
    for (auto& [t, count] : peak) count += (total_units - replayed) * (next.at(t) - count);
    for (auto& [t, count] : sync_peak) count += (total_units - replayed) * (sync_next.at(t) - count);
  }
  m.buffer_bytes = max_padded * double(dtype_size(o.compute_dtype));
  m.compute_buffers = peak[o.compute_dtype];
  m.kept_gradients = peak[o.compute_dtype] - sync_peak[o.compute_dtype];
  for (const auto& [t, count] : peak)
    if (t != o.compute_dtype) m.staging += count * max_padded * double(dtype_size(t));
  return m;
}

}  // namespace fsdp
