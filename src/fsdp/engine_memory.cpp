// The engine's memory from the units' shapes; see engine_memory.h. PoolReplay follows
// fsdp_engine.cpp hook by hook (acquire/release instead of the buffers themselves): keep
// the two in step.
#include "fsdp/fsdp/engine_memory.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "fsdp/core/error.h"

namespace fsdp {
namespace {

// What a unit holds, for the replay: trainable elements, frozen bytes, or both; direct: its
// shard is the whole unit in float32 (a group of one rank), with no pool buffer.
struct UnitKind {
  bool trainable = true, frozen = false, direct = false;
};

// A model of `layers` blocks as the engine sees it: the units by index (embedding, the
// blocks, the head, then under expert parallelism one expert unit per block) and the order
// the forward uses them in (each block's expert unit right after it: FsdpEngine::build_schedule).
struct ReplayModel {
  std::vector<UnitKind> kinds;
  std::vector<int> order;
  int layers = 0;
  bool experts = false;

  int head() const { return layers + 1; }
  int expert_unit(int l) const { return experts ? layers + 2 + l : -1; }
};

// The engine's buffer pool over one step of `model`, counting the buffers of each dtype in
// use at once (frozen gathers as uint8).
class PoolReplay {
 public:
  PoolReplay(ReplayModel model, const FsdpOptions& o, bool frozen_direct)
      : m_(std::move(model)), units_(int(m_.kinds.size())), o_(o), frozen_direct_(frozen_direct),
        full_(size_t(units_)), pending_(size_t(units_)), staging_(size_t(units_)), frozen_full_(size_t(units_)),
        full_grad_(size_t(units_)), reducing_(size_t(units_)), send_(size_t(units_)), position_(size_t(units_)) {
    for (int i = 0; i < int(m_.order.size()); ++i) position_[size_t(m_.order[size_t(i)])] = i;
  }

  // A training step: micro-batches in the order Llama::enqueue_forward_backward calls
  // the hooks (embedding and blocks forward, a block's expert unit inside its block's; the
  // head forward and backward back to back; blocks and embedding backward, which a
  // frozen-only embedding skips; finish), gradients reduced on the last.
  std::map<DType, double> step(int accum) {
    const bool skip_embedding = !m_.kinds[0].trainable && m_.kinds[0].frozen;
    for (int a = 0; a < accum; ++a) {
      sync_ = a == accum - 1;
      const int h = m_.head();
      before_forward(0), after_forward(0);
      for (int l = 0; l < m_.layers; ++l) {
        const int b = 1 + l, x = m_.expert_unit(l);
        before_forward(b);
        if (x >= 0) before_forward(x), after_forward(x);
        after_forward(b);
      }
      before_forward(h), after_forward(h);
      before_backward(h, skip_embedding), grads(h), after_backward(h);
      for (int l = m_.layers - 1; l >= 0; --l) {
        const int b = 1 + l, x = m_.expert_unit(l);
        if (x >= 0) before_backward(x, skip_embedding);
        before_backward(b, skip_embedding), grads(b);
        if (x >= 0) grads(x), after_backward(x);
        after_backward(b);
      }
      if (!skip_embedding) before_backward(0, skip_embedding), grads(0), after_backward(0);
      finish();
    }
    return peak_;
  }

 private:
  void acquire(DType t) { peak_[t] = std::max(peak_[t], double(++in_use_[t])); }
  void release(DType t) { --in_use_[t]; }
  bool staged() const { return o_.param_dtype != o_.compute_dtype; }
  bool trains(int u) const { return m_.kinds[size_t(u)].trainable; }
  bool direct(int u) const { return m_.kinds[size_t(u)].direct; }

  void issue_gather(int v) {
    if (!frozen_direct_ && m_.kinds[size_t(v)].frozen && !frozen_full_[v]) frozen_full_[v] = true, acquire(DType::U8);
    if (direct(v) || !trains(v) || full_[v] || pending_[v]) return;
    full_[v] = true, acquire(o_.compute_dtype);
    if (staged()) staging_[v] = true, acquire(o_.param_dtype);
    pending_[v] = true;
  }
  void wait_gather(int u) {
    if (!frozen_full_[u]) issue_gather(u);
    if (direct(u) || !trains(u)) return;
    if (!full_[u] && !pending_[u]) issue_gather(u);
    if (!pending_[u]) return;
    pending_[u] = false;
    if (staging_[u]) staging_[u] = false, release(o_.param_dtype);
  }
  void release_full(int u) {
    if (frozen_full_[u]) frozen_full_[u] = false, release(DType::U8);
    if (full_[u]) full_[u] = false, release(o_.compute_dtype);
  }
  // The next prefetch_limit units of the forward order, or of its reverse in backward.
  void prefetch(int u, bool backward, bool skip_embedding) {
    const int n = int(m_.order.size()), p = backward ? n - 1 - position_[size_t(u)] : position_[size_t(u)];
    for (int k = 1; k <= o_.prefetch_limit && p + k < n; ++k) {
      const int v = m_.order[size_t(backward ? n - 1 - (p + k) : p + k)];
      if (!(backward && skip_embedding && v == 0)) issue_gather(v);
    }
  }
  void before_forward(int u) {
    wait_gather(u);
    prefetch(u, false, false);
  }
  void after_forward(int u) {
    if (reshards_after_forward(o_.strategy) && u != m_.head()) release_full(u);
  }
  void before_backward(int u, bool skip_embedding) {
    wait_gather(u);
    prefetch(u, true, skip_embedding);
  }
  void grads(int u) {
    if (!direct(u) && trains(u) && !full_grad_[u]) full_grad_[u] = true, acquire(o_.compute_dtype);
  }
  // Reductions complete by unit index, as FsdpEngine::after_backward completes them.
  void after_backward(int u) {
    release_full(u);
    if (!sync_) return;
    if (!direct(u) && trains(u)) {
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

  ReplayModel m_;
  int units_;
  FsdpOptions o_;
  bool frozen_direct_;
  bool sync_ = true;
  std::vector<char> full_, pending_, staging_, frozen_full_, full_grad_, reducing_, send_;
  std::vector<int> position_;
  std::map<DType, int> in_use_;
  std::map<DType, double> peak_;
};

// The model's first `layers` blocks: the embedding (the first shape), the blocks of the
// middle shapes in order (the last one repeated should they hold fewer), the head (the last
// shape), and each block's expert unit from the expert shapes.
ReplayModel first_layers(const std::vector<UnitShape>& units, int layers,
                         const std::function<UnitKind(const UnitShape&)>& kind) {
  std::vector<const UnitShape*> plain, experts;
  for (const UnitShape& u : units) (u.experts ? experts : plain).push_back(&u);
  auto take = [&](const std::vector<const UnitShape*>& shapes) {
    std::vector<UnitKind> out;
    for (const UnitShape* s : shapes)
      for (double c = 0; c < s->count && int(out.size()) < layers; ++c) out.push_back(kind(*s));
    while (!out.empty() && int(out.size()) < layers) out.push_back(out.back());
    return out;
  };
  ReplayModel m;
  m.layers = layers;
  m.experts = !experts.empty();
  m.kinds.push_back(kind(*plain.front()));
  for (const UnitKind& k : take({plain.begin() + 1, plain.end() - 1})) m.kinds.push_back(k);
  m.kinds.push_back(kind(*plain.back()));
  if (m.experts)
    for (const UnitKind& k : take(experts)) m.kinds.push_back(k);
  m.order.push_back(0);
  for (int l = 0; l < layers; ++l) {
    m.order.push_back(1 + l);
    if (m.experts) m.order.push_back(m.expert_unit(l));
  }
  m.order.push_back(m.head());
  return m;
}

// A unit's extent once padded to the shard group (none for an empty unit).
double padded(double numel, int n) { return numel > 0 ? std::max(1.0, std::ceil(numel / n)) * n : 0.0; }

}  // namespace

EngineMemory engine_memory(const std::vector<UnitShape>& units, int n, const FsdpOptions& o, int accum) {
  EngineMemory m;
  const bool fp32 = o.param_dtype == DType::F32 && o.reduce_dtype == DType::F32 && o.compute_dtype == DType::F32;
  auto group = [&](const UnitShape& u) { return u.group > 0 ? u.group : n; };
  double plain = 0, expert_units = 0, max_padded = 0, max_frozen = 0;
  bool any_buffer = false;
  for (const UnitShape& u : units) {
    const int g = group(u);
    const double shard = padded(u.numel, g) / g;
    (u.experts ? expert_units : plain) += u.count;
    // The pool's buffers hold the largest padded unit, a direct one included (fsdp_engine.cpp's max_padded_numel).
    max_padded = std::max(max_padded, padded(u.numel, g));
    any_buffer = any_buffer || (u.numel > 0 && !(g == 1 && fp32));
    max_frozen = std::max(max_frozen, padded(u.frozen_bytes, n));
    m.frozen += u.count * padded(u.frozen_bytes, n) / n;
    m.master += u.count * shard * 4;
    if (o.param_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.param_dtype));
    if (o.reduce_dtype != DType::F32) m.shard_casts += u.count * shard * double(dtype_size(o.reduce_dtype));
  }
  const double layers = plain - 2;  // the blocks between the embedding and the head
  FSDP_CHECK(expert_units == 0 || expert_units == layers, "engine_memory: {} expert units for {} blocks", expert_units,
             layers);
  m.grads = m.master;
  m.moments = 2 * m.master;
  const bool frozen_direct = n == 1;  // FrozenShards hands out the shard itself
  if (!any_buffer && (frozen_direct || max_frozen == 0)) return m;

  // Replay a few layers past the prefetch window, then extend by the per-layer growth.
  auto kind = [&](const UnitShape& s) { return UnitKind{s.numel > 0, s.frozen_bytes > 0, group(s) == 1 && fp32}; };
  const int small = o.prefetch_limit + 6, replayed = int(std::min<double>(layers, small));
  const int a = std::min(accum, 3);  // two or more micro-batches all behave alike
  auto replay = [&](int count, int micro_batches) {
    return PoolReplay(first_layers(units, count, kind), o, frozen_direct).step(micro_batches);
  };
  std::map<DType, double> peak = replay(replayed, a);
  std::map<DType, double> sync_peak = replay(replayed, 1);
  if (layers > replayed) {
    const std::map<DType, double> next = replay(replayed + 1, a);
    const std::map<DType, double> sync_next = replay(replayed + 1, 1);
    for (auto& [t, count] : peak) count += (layers - replayed) * (next.at(t) - count);
    for (auto& [t, count] : sync_peak) count += (layers - replayed) * (sync_next.at(t) - count);
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
