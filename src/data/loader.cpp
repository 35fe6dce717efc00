// The streaming loader (loader.h): global order, this rank's micro-batch layout, and a
// ring of preallocated micro-batch buffers filled ahead by worker threads.
//
// Note [Loader ring]
// Micro-batch j lives in slot j % prefetch. Workers claim micro-batches in order
// (claim_ counts them) but only once slot j % prefetch has been consumed (j < next_ +
// prefetch), fill it outside the lock and mark it ready; next() waits for slot
// next_ % prefetch to hold micro-batch next_, copies it out and frees the slot. Several
// workers fill different slots at once, so micro-batches complete out of order but are
// consumed in order. A worker's exception is stored in its slot and rethrown by the
// next() that reaches it. seek() stops and joins the workers, resets the ring and starts
// them again: the results never depend on timing, so prefetching is bit-identical to
// reading on the calling thread. Steady state allocates nothing: slots, the workers'
// window scratch and the permutations (once per epoch) are the only buffers.
#include "fsdp/data/loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "fsdp/core/error.h"
#include "fsdp/core/random.h"
#include "fsdp/core/trace.h"

namespace fsdp::data {
namespace {

// Sources this large cannot be shuffled by a permutation held in memory (the synthetic
// source, whose samples are already independent draws, has INT64_MAX / 2).
constexpr int64_t kMaxShuffledSamples = int64_t(1) << 34;

}  // namespace

struct Loader::Impl {
  struct Slot {
    std::vector<int32_t> ids, targets, doc_start;
    int64_t index = -1;  // micro-batch held once ready
    bool ready = false;
    std::exception_ptr error;
  };
  struct Perm {
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> order;
  };

  std::shared_ptr<const SampleSource> source;
  LoaderOptions opt;
  int64_t num_samples = 0, global_batch = 0, tokens = 0;

  // Permutations of the epochs in use (the current and the next one): see sample_at().
  std::mutex perm_mutex;
  Perm perms[2];

  // Consumer state and ring (Note [Loader ring]).
  int64_t next_ = 0;
  int64_t origin_ = 0;  // global position of micro-batch 0 (seek_global)
  int starts_ = 0;      // worker generations: each seek restarts the threads
  double wait_ = 0;
  bool masked = false;               // the source has a loss mask
  bool documents = false;            // rows hold documents (the source's, or split_after)
  std::vector<int32_t> sync_window;  // scratch when reading on the calling thread
  std::vector<uint8_t> sync_mask;
  std::vector<int32_t> sync_starts;
  std::mutex mutex;
  std::condition_variable ready_cv, free_cv;
  std::vector<Slot> slots;
  int64_t claim_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers;

  bool async() const { return opt.num_workers > 0 && opt.prefetch > 0; }

  int64_t first_position(int64_t j) const {
    const int64_t step = j / opt.accum, a = j % opt.accum;
    return origin_ + step * global_batch + (a * opt.world + opt.rank) * opt.micro_batch;
  }

  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) {
    std::shared_ptr<const std::vector<int64_t>> found;
    {
      std::lock_guard<std::mutex> lock(perm_mutex);
      for (const Perm& p : perms)
        if (p.epoch == epoch) found = p.order;
    }
    if (!found) found = install(epoch, shuffled(epoch));
    // Prepare the next epoch ahead, so crossing into it costs no consumer a shuffle.
    bool have_next = false;
    {
      std::lock_guard<std::mutex> lock(perm_mutex);
      for (const Perm& p : perms) have_next = have_next || p.epoch == epoch + 1;
    }
    if (!have_next) install(epoch + 1, shuffled(epoch + 1));
    return found;
  }

  // Keeps `epoch` in the cache, evicting the oldest other entry; a concurrent caller may
  // have installed it first (both computed the same permutation).
  std::shared_ptr<const std::vector<int64_t>> install(int64_t epoch, std::shared_ptr<const std::vector<int64_t>> order) {
    std::lock_guard<std::mutex> lock(perm_mutex);
    for (const Perm& p : perms)
      if (p.epoch == epoch) return p.order;
    Perm& victim = perms[0].epoch < perms[1].epoch ? perms[0] : perms[1];
    victim.epoch = epoch;
    victim.order = std::move(order);
    return victim.order;
  }

  // Fisher-Yates keyed by (seed, epoch), drawn from the counter-based generator.
  std::shared_ptr<const std::vector<int64_t>> shuffled(int64_t epoch) const {
    auto order = std::make_shared<std::vector<int64_t>>(size_t(num_samples));
    for (int64_t i = 0; i < num_samples; ++i) (*order)[size_t(i)] = i;
    Rng rng(mix_key(opt.seed, 0x5ffd1e5ull, uint64_t(epoch)));
    for (int64_t i = num_samples - 1; i > 0; --i) std::swap((*order)[size_t(i)], (*order)[size_t(rng.below(uint64_t(i + 1)))]);
    return order;
  }

  // Window `sample`'s own document starts into `starts` (the first 0, increasing, <= seq_len;
  // one document at 0 for a source without documents), checked.
  void source_documents(int64_t sample, std::vector<int32_t>& starts) const {
    if (!source->has_documents()) {
      starts.assign(1, 0);
      return;
    }
    source->document_starts(sample, starts);
    FSDP_CHECK(!starts.empty() && starts.front() == 0, "sample {}'s documents must start at 0", sample);
    for (size_t k = 1; k < starts.size(); ++k)
      FSDP_CHECK(starts[k] > starts[k - 1] && starts[k] <= opt.seq_len,
                 "sample {}'s document starts must increase within [0, {}], got {} after {}", sample, opt.seq_len,
                 starts[k], starts[k - 1]);
  }

  // Row s of a micro-batch from its window: each token's document start into doc_start, the
  // later of the source's and of the last split_after token's (Llama 3's EOS) before it, so
  // the two sets of starts merge without a merged list; and every target crossing into a
  // new document (the token before a start) ignored.
  void apply_documents(const std::vector<int32_t>& starts, const int32_t* window, int32_t* doc_start,
                       int32_t* targets) const {
    const int64_t seq = opt.seq_len;
    size_t k = 0;
    int32_t after_eos = 0;
    for (int64_t t = 0; t < seq; ++t) {
      while (k + 1 < starts.size() && starts[k + 1] <= t) ++k;
      if (opt.split_after >= 0 && t > 0 && window[t - 1] == opt.split_after) after_eos = int32_t(t);
      doc_start[t] = std::max(starts[k], after_eos);
    }
    for (size_t d = 1; d < starts.size(); ++d) targets[starts[d] - 1] = kIgnoredTarget;
    if (opt.split_after >= 0)
      for (int64_t t = 0; t < seq; ++t)
        if (window[t] == opt.split_after) targets[t] = kIgnoredTarget;
  }

  // Reads micro-batch j into ids / targets ([micro * seq_len] each) and, with documents,
  // doc_start (else null); window is seq_len + 1, and so is mask (a masked source only);
  // starts is scratch.
  void fill(int64_t j, int32_t* ids, int32_t* targets, int32_t* doc_start, int32_t* window, uint8_t* mask,
            std::vector<int32_t>& starts) {
    const int64_t first = first_position(j), seq = opt.seq_len;
    std::shared_ptr<const std::vector<int64_t>> order;
    int64_t order_epoch = -1;
    for (int64_t s = 0; s < opt.micro_batch; ++s) {
      const int64_t p = first + s, epoch = p / num_samples, k = p % num_samples;
      int64_t sample = k;
      if (opt.shuffle) {
        if (epoch != order_epoch) {  // a micro-batch may straddle epochs
          order = permutation(epoch);
          order_epoch = epoch;
        }
        sample = (*order)[size_t(k)];
      }
      if (masked) {
        source->read_masked_sample(sample, window, mask);
      } else {
        source->read_sample(sample, window);
      }
      std::memcpy(ids + s * seq, window, size_t(seq) * sizeof(int32_t));
      std::memcpy(targets + s * seq, window + 1, size_t(seq) * sizeof(int32_t));
      if (masked) {
        // The target at position t is token t + 1: its mask byte decides.
        for (int64_t t = 0; t < seq; ++t)
          if (mask[t + 1] == 0) targets[s * seq + t] = kIgnoredTarget;
      }
      if (documents) {
        source_documents(sample, starts);
        apply_documents(starts, window, doc_start + s * seq, targets + s * seq);
      }
    }
  }

  void worker_loop(int worker) {
    // Every seek (each evaluation rewinds the validation loader) starts new threads: a
    // trace tells them apart by the generation.
    trace::set_thread_name(fmt::format("{} worker {}{}", opt.name, worker,
                                       starts_ > 1 ? fmt::format(" (start {})", starts_) : std::string()));
    std::vector<int32_t> window(size_t(opt.seq_len + 1));
    std::vector<uint8_t> mask(size_t(opt.seq_len + 1));
    std::vector<int32_t> starts;
    starts.reserve(size_t(opt.seq_len + 1));
    const int64_t ring = int64_t(slots.size());
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      free_cv.wait(lock, [&] { return stop_ || claim_ < next_ + ring; });
      if (stop_) return;
      const int64_t j = claim_++;
      Slot& slot = slots[size_t(j % ring)];
      lock.unlock();
      std::exception_ptr error;
      try {
        const trace::Span span("load micro-batch", "data", "index", j);
        fill(j, slot.ids.data(), slot.targets.data(), slot.doc_start.data(), window.data(), mask.data(), starts);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      slot.index = j;
      slot.error = error;
      slot.ready = true;
      ready_cv.notify_all();
    }
  }

  void start() {
    ++starts_;
    claim_ = next_;
    stop_ = false;
    for (Slot& s : slots) {
      s.ready = false;
      s.index = -1;
      s.error = nullptr;
    }
    const int n = std::min(opt.num_workers, opt.prefetch);
    try {
      for (int w = 0; w < n; ++w) workers.emplace_back([this, w] { worker_loop(w); });
    } catch (const std::system_error& e) {
      const size_t started = workers.size();
      stop();  // the threads already running, joined: a joinable thread left behind would terminate
      FSDP_FAIL("the data loader cannot start worker thread {} of {} (data.num_workers): {} (the process's thread "
                "limit, ulimit -u?)",
                started + 1, n, e.code().message());
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop_ = true;
    }
    free_cv.notify_all();
    for (std::thread& t : workers) t.join();
    workers.clear();
  }
};

Loader::Loader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  FSDP_CHECK(source != nullptr, "loader needs a sample source");
  const LoaderOptions& o = options;
  FSDP_CHECK(o.micro_batch >= 1 && o.accum >= 1, "loader needs micro_batch >= 1 and accum >= 1, got {} and {}",
             o.micro_batch, o.accum);
  FSDP_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "loader rank {} outside world of {}", o.rank, o.world);
  FSDP_CHECK(o.seq_len == source->seq_len(), "loader seq_len {} differs from the source's {}", o.seq_len,
             source->seq_len());
  FSDP_CHECK(o.num_workers >= 0 && o.prefetch >= 0, "loader num_workers {} and prefetch {} must be >= 0",
             o.num_workers, o.prefetch);
  m.source = std::move(source);
  m.opt = o;
  m.num_samples = m.source->num_samples();
  FSDP_CHECK(m.num_samples >= 1, "loader source has no samples");
  FSDP_CHECK(!o.shuffle || m.num_samples <= kMaxShuffledSamples,
             "cannot shuffle {} samples (a permutation in memory holds at most {}); use shuffle: false for an "
             "unbounded source such as the synthetic one, whose samples are independent already",
             m.num_samples, kMaxShuffledSamples);
  m.global_batch = o.micro_batch * o.accum * o.world;
  m.tokens = o.micro_batch * o.seq_len;
  m.sync_window.resize(size_t(o.seq_len + 1));
  m.sync_mask.resize(size_t(o.seq_len + 1));
  m.documents = m.source->has_documents() || o.split_after >= 0;
  // Ignored targets at document boundaries make a source with documents a masked one.
  m.masked = m.source->has_mask() || m.documents;
  m.sync_starts.reserve(size_t(o.seq_len + 1));
  if (m.async()) {
    m.slots.resize(size_t(o.prefetch));
    for (Impl::Slot& s : m.slots) {
      s.ids.resize(size_t(m.tokens));
      s.targets.resize(size_t(m.tokens));
      if (m.documents) s.doc_start.resize(size_t(m.tokens));
    }
    m.start();
  }
}

Loader::~Loader() {
  if (impl_ && impl_->async()) impl_->stop();
}

void Loader::next(const Tensor& ids, const Tensor& targets, const Tensor& doc_start) {
  Impl& m = *impl_;
  check_dtype(ids, DType::I32, "ids");
  check_dtype(targets, DType::I32, "targets");
  check_contiguous(ids, "ids");
  check_contiguous(targets, "targets");
  FSDP_CHECK(ids.device().is_cpu() && targets.device().is_cpu(), "loader writes CPU tensors, got ids {} / targets {}",
             ids.str(), targets.str());
  FSDP_CHECK(ids.numel() == m.tokens && targets.numel() == m.tokens,
             "ids {} / targets {} must hold micro_batch {} x seq_len {} tokens", ids.str(), targets.str(),
             m.opt.micro_batch, m.opt.seq_len);
  FSDP_CHECK(!m.documents || doc_start.defined(),
             "the loader's rows hold documents (packed examples or data.document_masking): next() needs a doc_start "
             "tensor for them");
  if (m.documents) {
    check_dtype(doc_start, DType::I32, "doc_start");
    check_contiguous(doc_start, "doc_start");
    FSDP_CHECK(doc_start.device().is_cpu() && doc_start.numel() == m.tokens,
               "doc_start {} must be a CPU tensor of micro_batch {} x seq_len {} tokens", doc_start.str(),
               m.opt.micro_batch, m.opt.seq_len);
  }
  int32_t* const doc_out = m.documents ? doc_start.data<int32_t>() : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  if (!m.async()) {
    m.fill(m.next_, ids.data<int32_t>(), targets.data<int32_t>(), doc_out, m.sync_window.data(), m.sync_mask.data(),
           m.sync_starts);
    ++m.next_;
  } else {
    std::unique_lock<std::mutex> lock(m.mutex);
    Impl::Slot& slot = m.slots[size_t(m.next_ % int64_t(m.slots.size()))];
    m.ready_cv.wait(lock, [&] { return slot.ready && slot.index == m.next_; });
    // A failed micro-batch stays failed: every later next() rethrows until seek().
    if (slot.error) std::rethrow_exception(slot.error);
    std::memcpy(ids.data<int32_t>(), slot.ids.data(), size_t(m.tokens) * sizeof(int32_t));
    std::memcpy(targets.data<int32_t>(), slot.targets.data(), size_t(m.tokens) * sizeof(int32_t));
    if (doc_out != nullptr) std::memcpy(doc_out, slot.doc_start.data(), size_t(m.tokens) * sizeof(int32_t));
    slot.ready = false;
    ++m.next_;
    lock.unlock();
    m.free_cv.notify_all();
  }
  m.wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t Loader::first_position(int64_t j) const { return impl_->first_position(j); }

bool Loader::masked() const { return impl_->masked; }

bool Loader::documents() const { return impl_->documents; }

void SampleSource::document_starts(int64_t, std::vector<int32_t>& out) const { out.assign(1, 0); }

void SampleSource::read_masked_sample(int64_t index, int32_t* window, uint8_t* mask) const {
  read_sample(index, window);
  std::memset(mask, 1, size_t(seq_len() + 1));
}

int64_t Loader::position() const { return impl_->next_; }

void Loader::seek(int64_t position) {
  Impl& m = *impl_;
  FSDP_CHECK(position >= 0, "loader position must be >= 0, got {}", position);
  if (m.async()) m.stop();
  m.next_ = position;
  if (m.async()) m.start();
}

void Loader::seek_global(int64_t global_position) {
  Impl& m = *impl_;
  FSDP_CHECK(global_position >= 0, "loader global position must be >= 0, got {}", global_position);
  if (m.async()) m.stop();
  m.origin_ = global_position;
  m.next_ = 0;
  if (m.async()) m.start();
}

double Loader::wait_seconds() const { return impl_->wait_; }

int64_t Loader::epoch() const { return impl_->first_position(impl_->next_) / impl_->num_samples; }

}  // namespace fsdp::data
