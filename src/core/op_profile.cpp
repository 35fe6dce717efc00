// The op profiler's record (fsdp/core/op_profile.h): counts and times per stub, and the
// CUDA event pairs not yet read. One mutex guards it all; it is taken only while profiling.
#include "fsdp/core/op_profile.h"

#include <algorithm>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "fsdp/core/trace.h"
#include "op_profile_events.h"
#include "trace_recorder.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::op_profile {
namespace {

struct Totals {
  int64_t calls = 0;
  double ms = 0;
};

// A CUDA call whose time is still on the device.
struct Pending {
  const char* name;
  int device;
  void* events[2];
};

struct Record {
  std::mutex mu;
  // Keyed by the stub's name pointer: one string per stub, constant for the process, so a
  // call hashes a pointer and never builds a string.
  std::unordered_map<const char*, Totals> totals;
  std::vector<Pending> pending;
};

Record& record() {
  static Record r;
  return r;
}

}  // namespace

std::string detail::op_name(std::string_view stub) {
  constexpr std::string_view kSuffix = "_stub";
  if (stub.size() > kSuffix.size() && stub.substr(stub.size() - kSuffix.size()) == kSuffix)
    stub.remove_suffix(kSuffix.size());
  return std::string(stub);
}

void enable(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

void reset() {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  r.totals.clear();
#if defined(FSDP_WITH_CUDA)
  for (const Pending& p : r.pending) detail::cuda_release(p.device, p.events);
#endif
  r.pending.clear();
}

std::vector<OpTime> report() {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
#if defined(FSDP_WITH_CUDA)
  for (const Pending& p : r.pending) r.totals[p.name].ms += detail::cuda_elapsed_ms(p.device, p.events);
#endif
  r.pending.clear();
  std::vector<OpTime> rows;
  rows.reserve(r.totals.size());
  for (const auto& [name, t] : r.totals) rows.push_back(OpTime{detail::op_name(name), t.calls, t.ms});
  std::sort(rows.begin(), rows.end(), [](const OpTime& a, const OpTime& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.op < b.op;
  });
  return rows;
}

Scope::Scope(const char* stub_name, Device device) : name_(stub_name), device_(device) {
  if (device.is_cpu()) {
    start_ = std::chrono::steady_clock::now();
    return;
  }
#if defined(FSDP_WITH_CUDA)
  stream_ = cuda::current_stream(device.index);
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  detail::cuda_begin(device.index, events_);
#endif
}

// The call is counted here, at its end, so a reset() while it runs cannot leave a call
// without its time. A destructor must not throw (the op may be unwinding): a failure to
// record leaves the call unrecorded, and a broken device shows in the next op's launch.
Scope::~Scope() {
  Record& r = record();
  try {
    if (device_.is_cpu()) {
      const auto end = std::chrono::steady_clock::now();
      const double ms = std::chrono::duration<double, std::milli>(end - start_).count();
      if (trace::enabled()) trace::complete(detail::op_name(name_), "op", start_, end);
      std::lock_guard<std::mutex> lock(r.mu);
      Totals& t = r.totals[name_];
      ++t.calls;
      t.ms += ms;
      return;
    }
#if defined(FSDP_WITH_CUDA)
    std::lock_guard<std::mutex> lock(r.mu);
    detail::cuda_end(device_.index, events_);
    ++r.totals[name_].calls;
    if (trace::enabled()) {
      trace::detail::cuda_adopt_op(name_, device_.index, stream_, events_);
    } else {
      r.pending.push_back(Pending{name_, device_.index, {events_[0], events_[1]}});
    }
#endif
  } catch (...) {
  }
}

#if defined(FSDP_WITH_CUDA)
namespace detail {
void credit_traced(const char* stub_name, int device, void* const events[2], double ms) {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  r.totals[stub_name].ms += ms;
  cuda_release(device, events);
}

void lend_pair(int device, void* events[2]) {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  cuda_take_pair(device, events);
}

void return_pair(int device, void* const events[2]) {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  cuda_release(device, events);
}
}  // namespace detail
#endif

}  // namespace fsdp::op_profile
