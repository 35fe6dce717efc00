// The engine's memory from the units' shapes; see engine_memory.h. PoolReplay follows
// fsdp_engine.cpp hook by hook (acquire/release instead of the buffers themselves): keep
// the two in step.
#include "fsdp/fsdp/engine_memory.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace fsdp {
namespace {

// What a unit holds, for the replay: trainable elements, frozen bytes, or both.
struct UnitKind {
  bool trainable = true, frozen = false;
};

// The engine's buffer pool over one step of a model of units `kinds`, counting the
// buffers of each dtype in use at once (frozen gathers as uint8).
class PoolReplay {
 public:
  PoolReplay(std::vector<UnitKind> kinds, const FsdpOptions& o, bool direct, bool frozen_direct)
      : kinds_(std::move(kinds)), units_(int(kinds_.size())), o_(o), direct_(direct), frozen_direct_(frozen_direct),
        full_(size_t(units_)), pending_(size_t(units_)), staging_(size_t(units_)), frozen_full_(size_t(units_)),
        full_grad_(size_t(units_)), reducing_(size_t(units_)), send_(size_t(units_)) {}

  // A training step: micro-batches in the order Llama::enqueue_forward_backward calls
  // the hooks (embedding and blocks forward; the head forward and backward back to back;
  // blocks and embedding backward, which a frozen-only embedding skips; finish), gradients
  // reduced on the last.
  std::map<DType, double> step(int accum) {
    const bool skip_embedding = !kinds_[0].trainable && kinds_[0].frozen;
    for (int a = 0; a < accum; ++a) {
      sync_ = a == accum - 1;
      const int h = units_ - 1;
      for (int u = 0; u < h; ++u) before_forward(u), after_forward(u);
      before_forward(h), after_forward(h);
      for (int u = h; u >= (skip_embedding ? 1 : 0); --u)
        before_backward(u, skip_embedding), grads(u), after_backward(u);
      finish();
    }
    return peak_;
  }

 private:
  void acquire(DType t) { peak_[t] = std::max(peak_[t], double(++in_use_[t])); }
  void release(DType t) { --in_use_[t]; }
  bool staged() const { return o_.param_dtype != o_.compute_dtype; }
  bool trains(int u) const { return kinds_[size_t(u)].trainable; }

  void issue_gather(int v) {
    if (v < 0 || v >= units_) return;
    if (!frozen_direct_ && kinds_[size_t(v)].frozen && !frozen_full_[v]) frozen_full_[v] = true, acquire(DType::U8);
    if (direct_ || !trains(v) || full_[v] || pending_[v]) return;
    full_[v] = true, acquire(o_.compute_dtype);
    if (staged()) staging_[v] = true, acquire(o_.param_dtype);
    pending_[v] = true;
  }
  void wait_gather(int u) {
    if (!frozen_full_[u]) issue_gather(u);
    if (direct_ || !trains(u)) return;
    if (!full_[u] && !pending_[u]) issue_gather(u);
    if (!pending_[u]) return;
    pending_[u] = false;
    if (staging_[u]) staging_[u] = false, release(o_.param_dtype);
  }
  void release_full(int u) {
    if (frozen_full_[u]) frozen_full_[u] = false, release(DType::U8);
    if (full_[u]) full_[u] = false, release(o_.compute_dtype);
  }
  void before_forward(int u) {
    wait_gather(u);
    for (int k = 1; k <= o_.prefetch_limit; ++k) issue_gather(u + k);
  }
  void after_forward(int u) {
    if (reshards_after_forward(o_.strategy) && u != units_ - 1) release_full(u);
  }
  void before_backward(int u, bool skip_embedding) {
    wait_gather(u);
    for (int k = 1; k <= o_.prefetch_limit; ++k)
      if (!(skip_embedding && u - k == 0)) issue_gather(u - k);
  }
  void grads(int u) {
    if (!direct_ && trains(u) && !full_grad_[u]) full_grad_[u] = true, acquire(o_.compute_dtype);
  }
  void after_backward(int u) {
    release_full(u);
    if (!sync_) return;
    if (!direct_ && trains(u)) {
      if (o_.reduce_dtype != o_.compute_dtype) send_[u] = true, acquire(o_.reduce_dtype);
      reducing_[u] = true;
    }
    for (int above = u + 1; above < units_; ++above) complete_reduce(above);
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

  std::vector<UnitKind> kinds_;
  int units_;
  FsdpOptions o_;
  bool direct_, frozen_direct_;
  bool sync_ = true;
  std::vector<char> full_, pending_, staging_, frozen_full_, full_grad_, reducing_, send_;
  std::map<DType, int> in_use_;
  std::map<DType, double> peak_;
};

// The first `n` units of the model's order, the units of the middle shapes repeated (the
// first and last shapes are the embedding and the head: kept at the ends).
std::vector<UnitKind> first_units(const std::vector<UnitShape>& units, int n) {
  auto kind = [](const UnitShape& s) { return UnitKind{s.numel > 0, s.frozen_bytes > 0}; };
  std::vector<UnitKind> out;
  out.push_back(kind(units.front()));
  for (size_t i = 1; i + 1 < units.size() && int(out.size()) < n - 1; ++i)
    for (double c = 0; c < units[i].count && int(out.size()) < n - 1; ++c) out.push_back(kind(units[i]));
  while (int(out.size()) < n - 1) out.push_back(out.back());
  out.push_back(kind(units.back()));
  return out;
}

// A unit's extent once padded to the shard group (none for an empty unit).
double padded(double numel, int n) { return numel > 0 ? std::max(1.0, std::ceil(numel / n)) * n : 0.0; }

}  // namespace

EngineMemory engine_memory(const std::vector<UnitShape>& units, int n, const FsdpOptions& o, int accum) {
  EngineMemory m;
  double total_units = 0, max_padded = 0, max_frozen = 0;
  for (const UnitShape& u : units) {
    const double shard = padded(u.numel, n) / n;
    total_units += u.count;
    max_padded = std::max(max_padded, padded(u.numel, n));
    max_frozen = std::max(max_frozen, padded(u.frozen_bytes, n));
    m.frozen += u.count * padded(u.frozen_bytes, n) / n;
    m.master += u.count * shard * 4;
    if (o.param_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.param_dtype));
    if (o.reduce_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.reduce_dtype));
  }
  m.grads = m.master;
  m.moments = 2 * m.master;
  const bool direct = n == 1 && o.param_dtype == DType::F32 && o.reduce_dtype == DType::F32 &&
                      o.compute_dtype == DType::F32;
  const bool frozen_direct = n == 1;  // FrozenShards hands out the shard itself
  if (direct && (frozen_direct || max_frozen == 0)) return m;

  // Replay a few units past the prefetch window, then extend by the per-unit growth.
  const int small = o.prefetch_limit + 6, replayed = int(std::min<double>(total_units, small));
  const int a = std::min(accum, 3);  // two or more micro-batches all behave alike
  auto replay = [&](int count, int micro_batches) {
    return PoolReplay(first_units(units, count), o, direct, frozen_direct).step(micro_batches);
  };
  std::map<DType, double> peak = replay(replayed, a);
  std::map<DType, double> sync_peak = replay(replayed, 1);
  if (total_units > replayed) {
    const std::map<DType, double> next = replay(replayed + 1, a);
    const std::map<DType, double> sync_next = replay(replayed + 1, 1);
    for (auto& [t, count] : peak) count += (total_units - replayed) * (next.at(t) - count);
    for (auto& [t, count] : sync_peak) count += (total_units - replayed) * (sync_next.at(t) - count);
  }
  m.buffer_bytes = max_padded * double(dtype_size(o.compute_dtype));
  m.compute_buffers = peak[o.compute_dtype];
  m.kept_gradients = peak[o.compute_dtype] - sync_peak[o.compute_dtype];
  m.frozen_buffer_bytes = max_frozen;
  m.frozen_buffers = peak[DType::U8];
  for (const auto& [t, count] : peak)
    if (t != o.compute_dtype && t != DType::U8) m.staging += count * max_padded * double(dtype_size(t));
  return m;
}

}  // namespace fsdp
