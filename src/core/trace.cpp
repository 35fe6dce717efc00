// The trace recorder (fsdp/core/trace.h): one list of events under one mutex, per-thread
// stacks of open spans, and the Chrome trace JSON writer. Device spans live in the CUDA
// half (cuda/trace_cuda.cpp) until written.
//
// Note [Trace generations]
// Every start() and clear() begins a new generation. A span remembers the generation it
// opened in and an async span carries it in its id; a close from an older generation is
// dropped, so a span that straddles a start, clear or stop never appears half recorded,
// and a thread's stale open entries (it was inside a span when recording stopped) are
// discarded the next time it opens one.
#include "fsdp/core/trace.h"

#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "fsdp/core/error.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/core/text_file.h"
#include "trace_recorder.h"

namespace fsdp::trace {
namespace {

constexpr int kFirstStreamTrack = 1000;  // device stream tracks after the threads'
constexpr int kGenerationShift = 40;     // async ids: generation << 40 | counter
constexpr int kFirstThreadSort = 10;     // after tracks with a sort index of their own

struct Recorder {
  std::mutex mu;
  std::vector<detail::Event> events;
  std::map<int, std::string> track_names;  // threads and streams
  std::map<int, int> sort_index;           // tracks that set one
  std::map<std::pair<int, void*>, int> stream_tracks;
  // start()'s time, read by every recording thread without the lock.
  std::atomic<int64_t> base_ns{0};
  std::atomic<uint64_t> generation{1};
  uint64_t next_async = 1;
  int next_tid = 1;
  uint64_t bytes_sent = 0;
  bool profiler_was_on = false;
};

Recorder& rec() {
  static Recorder r;
  return r;
}

struct Open {
  std::string name, category, args;
  double ts = 0;
  uint64_t generation = 0;
};

thread_local int tl_tid = 0;
thread_local std::vector<Open> tl_open;

int this_tid_locked(Recorder& r) {
  if (tl_tid == 0) tl_tid = r.next_tid++;
  return tl_tid;
}

int this_tid() {
  if (tl_tid != 0) return tl_tid;
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  return this_tid_locked(r);
}

std::string escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", int(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::string quoted(std::string_view s) { return fmt::format("\"{}\"", escaped(s)); }

void append_event_json(std::string& out, const detail::Event& e, int pid) {
  out += fmt::format(R"({{"ph":"{}","name":"{}","cat":"{}","pid":{},"tid":{},"ts":{:.3f})", e.phase, escaped(e.name),
                     escaped(e.category), pid, e.tid, e.ts);
  if (e.phase == 'X') out += fmt::format(R"(,"dur":{:.3f})", e.dur);
  if (e.phase == 'b' || e.phase == 'e') out += fmt::format(R"(,"id":"0x{:x}")", e.id);
  if (!e.args.empty()) out += ",\"args\":" + e.args;
  out += "}";
}

void append_metadata(std::string& out, const char* what, int pid, int tid, const std::string& key,
                     const std::string& value_json) {
  out += fmt::format(R"({{"ph":"M","name":"{}","pid":{},"tid":{},"args":{{"{}":{}}}}})", what, pid, tid, key,
                     value_json);
}

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

// ---------------------------------------------------------------- recording

void start(const std::vector<int>& cuda_devices) {
  if (enabled()) stop();  // a second start() begins afresh
  Recorder& r = rec();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.events.clear();
    r.base_ns.store(ns_of(Clock::now()));
    r.generation.fetch_add(1);
    r.bytes_sent = 0;
  }
#if defined(FSDP_WITH_CUDA)
  detail::cuda_resolve(false);  // anything left from an earlier recording
  detail::cuda_start(cuda_devices);
#else
  FSDP_CHECK(cuda_devices.empty(), "trace::start: CUDA devices given to a build without the CUDA backend");
#endif
  r.profiler_was_on = op_profile::enabled();
  op_profile::enable(true);
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

void clear() {
#if defined(FSDP_WITH_CUDA)
  detail::cuda_resolve(false);
#endif
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.clear();
  r.generation.fetch_add(1);
  r.bytes_sent = 0;
}

void stop() {
  if (!enabled()) return;
  detail::g_enabled.store(false, std::memory_order_relaxed);
  op_profile::enable(rec().profiler_was_on);
}

size_t num_events() {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.events.size();
}

double to_us(Clock::time_point t) { return 1e-3 * double(ns_of(t) - rec().base_ns.load()); }

double now_us() { return to_us(Clock::now()); }

// ---------------------------------------------------------------- writing

std::string to_json(int pid, const std::string& process_name, const std::string& other_data) {
#if defined(FSDP_WITH_CUDA)
  detail::cuda_resolve(true);
#endif
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  // In time order, a parent before the children that start with it, so every track reads
  // forward and a viewer (or a test) can check nesting in one pass.
  std::vector<const detail::Event*> order;
  order.reserve(r.events.size());
  for (const detail::Event& e : r.events) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const detail::Event* a, const detail::Event* b) {
    return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
  });
  std::string out = "{\"traceEvents\":[\n";
  append_metadata(out, "process_name", pid, 0, "name", quoted(process_name));
  out += ",\n";
  append_metadata(out, "process_sort_index", pid, 0, "sort_index", std::to_string(pid));
  for (const auto& [tid, name] : r.track_names) {
    out += ",\n";
    append_metadata(out, "thread_name", pid, tid, "name", quoted(name));
    out += ",\n";
    const auto sort = r.sort_index.find(tid);
    append_metadata(out, "thread_sort_index", pid, tid, "sort_index",
                    std::to_string(sort != r.sort_index.end() ? sort->second : kFirstThreadSort + tid));
  }
  for (const detail::Event* e : order) {
    out += ",\n";
    append_event_json(out, *e, pid);
  }
  out += "\n],\"displayTimeUnit\":\"ms\"";
  if (!other_data.empty()) out += ",\"otherData\":" + other_data;
  out += "}\n";
  return out;
}

void write(const std::string& path, int pid, const std::string& process_name, const std::string& other_data) {
  write_text_file(path, to_json(pid, process_name, other_data));
}

// ---------------------------------------------------------------- events

Arg::Arg(const char* k, double v) : key(k), json(fmt::format("{}", v)) {}
Arg::Arg(const char* k, int64_t v) : key(k), json(std::to_string(v)) {}
Arg::Arg(const char* k, uint64_t v) : key(k), json(std::to_string(v)) {}
Arg::Arg(const char* k, std::string_view v) : key(k), json(quoted(v)) {}

std::string args(std::initializer_list<Arg> list) {
  std::string out = "{";
  for (const Arg& a : list) {
    if (out.size() > 1) out += ",";
    out += quoted(a.key) + ":" + a.json;
  }
  return out + "}";
}

void begin(std::string_view name, std::string_view category, std::string args_json) {
  if (!enabled()) return;
  const uint64_t generation = rec().generation.load();
  while (!tl_open.empty() && tl_open.back().generation != generation) tl_open.pop_back();
  tl_open.push_back(Open{std::string(name), std::string(category), std::move(args_json), now_us(), generation});
}

void end() {
  if (!enabled() || tl_open.empty()) return;
  Open o = std::move(tl_open.back());
  tl_open.pop_back();
  if (o.generation != rec().generation.load()) return;
  const double t = now_us();
  detail::append(detail::Event{'X', std::move(o.name), std::move(o.category), std::move(o.args), o.ts, t - o.ts,
                               this_tid(), 0});
}

void Span::open(std::string_view name, std::string_view category, std::string args_json) {
  begin(name, category, std::move(args_json));
  open_ = true;
}

void complete(std::string_view name, std::string_view category, Clock::time_point start, Clock::time_point end,
              std::string args_json) {
  if (!enabled()) return;
  const double ts = to_us(start);
  if (ts < 0) return;  // began before start()
  detail::append(detail::Event{'X', std::string(name), std::string(category), std::move(args_json), ts,
                               to_us(end) - ts, this_tid(), 0});
}

uint64_t async_begin(std::string_view name, std::string_view category, std::string args_json) {
  if (!enabled()) return 0;
  Recorder& r = rec();
  const int tid = this_tid();
  std::lock_guard<std::mutex> lock(r.mu);
  const uint64_t id = (r.generation.load() << kGenerationShift) | r.next_async++;
  r.events.push_back(detail::Event{'b', std::string(name), std::string(category), std::move(args_json), now_us(), 0,
                                   tid, id});
  return id;
}

void async_end(uint64_t id, std::string_view name, std::string_view category) {
  if (!enabled() || id == 0) return;
  Recorder& r = rec();
  const int tid = this_tid();
  std::lock_guard<std::mutex> lock(r.mu);
  if ((id >> kGenerationShift) != r.generation.load()) return;
  r.events.push_back(detail::Event{'e', std::string(name), std::string(category), {}, now_us(), 0, tid, id});
}

void counter(std::string_view name, std::initializer_list<std::pair<const char*, double>> values) {
  if (!enabled()) return;
  std::string a = "{";
  for (const auto& [k, v] : values) a += fmt::format("{}\"{}\":{}", a.size() > 1 ? "," : "", escaped(k), v);
  a += "}";
  detail::append(detail::Event{'C', std::string(name), "counter", std::move(a), now_us(), 0, 0, 0});
}

void add_bytes_sent(uint64_t bytes) {
  if (!enabled()) return;
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  r.bytes_sent += bytes;
  r.events.push_back(detail::Event{'C', "bytes sent", "counter",
                                   fmt::format("{{\"bytes\":{}}}", r.bytes_sent), now_us(), 0, 0, 0});
}

void set_thread_name(std::string name, int sort_index) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  const int tid = this_tid_locked(r);
  r.track_names[tid] = std::move(name);
  if (sort_index >= 0) r.sort_index[tid] = sort_index;
}

void name_stream(int device, void* stream, std::string name) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, fresh] = r.stream_tracks.try_emplace({device, stream}, kFirstStreamTrack + int(r.stream_tracks.size()));
  r.track_names[it->second] = fmt::format("cuda:{} {} stream", device, name);
}

namespace detail {

void append(Event e) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.push_back(std::move(e));
}

int stream_track(int device, void* stream) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, fresh] = r.stream_tracks.try_emplace({device, stream}, kFirstStreamTrack + int(r.stream_tracks.size()));
  if (fresh) r.track_names[it->second] = fmt::format("cuda:{} stream {}", device, stream);
  return it->second;
}

}  // namespace detail
}  // namespace fsdp::trace
