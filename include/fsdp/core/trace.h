// A timeline recorder that writes the Chrome trace event format (the JSON that
// chrome://tracing and ui.perfetto.dev open, and torch.profiler's export_chrome_trace
// writes): what each thread of this process did and when, what each GPU stream ran, and
// counters (memory, bytes sent). The trainer records the steps logging.profile_* choose
// (obs/profiler.h); everything else only reports into it.
//
//   { trace::Span s("optimizer step"); ... }       // a span on this thread's track
//   trace::counter("bytes sent", {{"bytes", n}});  // a point on a counter track
//
// Tracks (the "tid" of each event): one per host thread that recorded something, named by
// set_thread_name ("main (training loop)", "loader worker 0", "checkpoint writer"); on the
// CUDA backend one per device stream (StreamSpan below, and every op the op profiler times:
// fsdp/core/op_profile.h). Collectives that run on no stream (MPI on the CPU backend) are
// async spans from issue to completion, since several are in flight at once.
//
// Off (the default), every entry point costs one relaxed atomic load and a branch and
// records nothing, and the op profiler stays off. On, an event takes a mutex and appends
// one record (no I/O until write()); a device span costs two cudaEventRecord calls.
//
// Time: microseconds since start(), on the host's steady clock. The trainer starts every
// rank's recording right after a barrier, so the ranks' files share one time axis to within
// the barrier's skew (a few microseconds on one node) and merge (`fsdp_train trace-merge`).
// A device span is placed on that axis through a base event recorded and waited for at
// start(): ts = base + cudaEventElapsedTime(base, span start), which puts device tracks
// late by the base wait's latency (microseconds).
//
// Spans nest per thread, as NVTX ranges do (fsdp/core/nvtx.h opens one here for every NVTX
// range, with the same name). A span opened before start() and closed after it, or open
// across stop(), is not recorded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdp::trace {

namespace detail {
inline std::atomic<bool> g_enabled{false};
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

using Clock = std::chrono::steady_clock;

// ---- recording ----

// Starts recording: drops everything recorded before, sets the time base to now, turns the
// op profiler on (so every op is timed) and, for each CUDA device listed, records its base
// event and waits for it. Call on a step boundary with no span open.
void start(const std::vector<int>& cuda_devices = {});
// Drops what was recorded so far (waiting for pending device spans first), keeping the
// time base: the end of torch.profiler's warmup.
void clear();
// Stops recording (the op profiler goes back to what it was before start()); what was
// recorded is kept for write().
void stop();
// Events recorded since the last start/clear (device spans count once resolved by write).
size_t num_events();

// The recording as one Chrome trace JSON document: every event with pid = `pid`, the
// process and thread names as metadata events, and `other_data` (a JSON object's text, or
// "") as "otherData". Waits for pending device spans first.
std::string to_json(int pid, const std::string& process_name, const std::string& other_data);
// to_json written to `path` through a temporary file and a rename; throws fsdp::Error
// naming the file when it cannot.
void write(const std::string& path, int pid, const std::string& process_name, const std::string& other_data);

double now_us();                 // since start()
double to_us(Clock::time_point t);

// ---- events ----

// An event's "args" entry; the value is kept as JSON text.
struct Arg {
  Arg(const char* k, double v);
  Arg(const char* k, int64_t v);
  Arg(const char* k, uint64_t v);
  Arg(const char* k, int v) : Arg(k, int64_t(v)) {}
  Arg(const char* k, std::string_view v);
  Arg(const char* k, const char* v) : Arg(k, std::string_view(v)) {}
  std::string key, json;
};
// {"k": v, ...} as JSON text.
std::string args(std::initializer_list<Arg> list);

// Opens / closes a span on this thread's track.
void begin(std::string_view name, std::string_view category = "host", std::string args_json = {});
void end();

// A span on this thread's track for the lifetime of the object.
class Span {
 public:
  explicit Span(std::string_view name, std::string_view category = "host") {
    if (enabled()) open(name, category, {});
  }
  // With one integer argument, formatted only when recording ("step": 12).
  Span(std::string_view name, std::string_view category, const char* key, int64_t value) {
    if (enabled()) open(name, category, args({{key, value}}));
  }
  ~Span() {
    if (open_) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  void open(std::string_view name, std::string_view category, std::string args_json);
  bool open_ = false;
};

// A span already over, on this thread's track (the op profiler's CPU ops).
void complete(std::string_view name, std::string_view category, Clock::time_point start, Clock::time_point end,
              std::string args_json = {});
// A span that overlaps others (a collective in flight): begins now, ends at async_end(id).
uint64_t async_begin(std::string_view name, std::string_view category, std::string args_json);
void async_end(uint64_t id, std::string_view name, std::string_view category);
// A point on the counter track `name`: one series per value (Perfetto stacks them).
void counter(std::string_view name, std::initializer_list<std::pair<const char*, double>> values);
// Adds to this process's "bytes sent" counter track (the running total since start()).
void add_bytes_sent(uint64_t bytes);

// Names the calling thread's track (kept even while not recording; cheap). Tracks are
// listed by sort_index, then in the order their threads first recorded; the trainer's
// main thread takes 0 so it comes first.
void set_thread_name(std::string name, int sort_index = -1);

// ---- device streams (CUDA builds) ----

// Names a stream's track: "cuda:<device> <name> stream".
void name_stream(int device, void* stream, std::string name);

// Work enqueued on `stream` of cuda:`device` while in scope, timed by a pair of events
// recorded on that stream and placed on the stream's track when the trace is written.
// Only in builds with a CUDA backend (it records CUDA events).
class StreamSpan {
 public:
  StreamSpan(int device, void* stream, std::string_view name, std::string_view category, std::string args_json);
  ~StreamSpan();
  StreamSpan(const StreamSpan&) = delete;
  StreamSpan& operator=(const StreamSpan&) = delete;

 private:
  int device_ = -1;
  void* stream_ = nullptr;
  void* events_[2] = {nullptr, nullptr};
  std::string name_, category_, args_;
};

}  // namespace fsdp::trace
