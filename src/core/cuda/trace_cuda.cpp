// The trace recorder's CUDA half (fsdp/core/trace.h, src/core/trace_recorder.h): base
// events that tie each device's clock to the trace's, device spans (StreamSpan, and the op
// profiler's event pairs adopted while tracing) waiting to be read, and their placement on
// stream tracks. Events for StreamSpan come from a pool of this file's own, created in
// chunks and kept for the process; adopted pairs go back to the op profiler's pool.
#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../op_profile_events.h"
#include "../trace_recorder.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/error.h"
#include "fsdp/core/trace.h"

namespace fsdp::trace {
namespace detail {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kChunk = 64;

struct Pending {
  std::string name, category, args;
  int device = 0;
  void* stream = nullptr;
  cudaEvent_t events[2] = {nullptr, nullptr};
  const char* op_stub = nullptr;  // an op profiler pair: credit and return it there
};

struct DeviceClock {
  cudaEvent_t base = nullptr;
  double base_us = 0;
  bool valid = false;
};

struct State {
  std::mutex mu;  // all of the below
  std::vector<Pending> pending;
  std::array<DeviceClock, kMaxDevices> clocks{};
  std::array<std::vector<cudaEvent_t>, kMaxDevices> pool;
};

State& state() {
  static State s;
  return s;
}

void check_device(int device) {
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices the trace supports", device,
             kMaxDevices);
}

cudaEvent_t take_locked(State& s, int device) {
  std::vector<cudaEvent_t>& free = s.pool[size_t(device)];
  if (free.empty()) {
    cuda::DeviceGuard guard(device);
    for (int i = 0; i < kChunk; ++i) {
      cudaEvent_t e = nullptr;
      FSDP_CUDA_CHECK(cudaEventCreate(&e));
      free.push_back(e);
    }
  }
  cudaEvent_t e = free.back();
  free.pop_back();
  return e;
}

std::string op_name(std::string_view stub) {
  constexpr std::string_view kSuffix = "_stub";
  if (stub.size() > kSuffix.size() && stub.substr(stub.size() - kSuffix.size()) == kSuffix)
    stub.remove_suffix(kSuffix.size());
  return std::string(stub);
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

void cuda_start(const std::vector<int>& devices) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (DeviceClock& c : s.clocks) c.valid = false;
  for (const int d : devices) {
    check_device(d);
    DeviceClock& c = s.clocks[size_t(d)];
    const cuda::DeviceGuard guard(d);
    if (c.base == nullptr) FSDP_CUDA_CHECK(cudaEventCreate(&c.base));
    FSDP_CUDA_CHECK(cudaEventRecord(c.base, static_cast<cudaStream_t>(cuda::current_stream(d))));
    FSDP_CUDA_CHECK(cudaEventSynchronize(c.base));
    c.base_us = now_us();
    c.valid = true;
  }
}

void cuda_adopt_op(const char* stub_name, int device, void* stream, void* const events[2]) {
  State& s = state();
  Pending p;
  p.device = device;
  p.stream = stream;
  p.events[0] = static_cast<cudaEvent_t>(events[0]);
  p.events[1] = static_cast<cudaEvent_t>(events[1]);
  p.op_stub = stub_name;
  std::lock_guard<std::mutex> lock(s.mu);
  s.pending.push_back(std::move(p));
}

void cuda_resolve(bool keep) {
  State& s = state();
  std::vector<Pending> pending;
  std::array<DeviceClock, kMaxDevices> clocks;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    pending.swap(s.pending);
    clocks = s.clocks;
  }
  std::vector<cudaEvent_t> returned[kMaxDevices];
  for (Pending& p : pending) {
    const cuda::DeviceGuard guard(p.device);
    FSDP_CUDA_CHECK(cudaEventSynchronize(p.events[1]));
    const double ms = elapsed_ms(p.events[0], p.events[1]);
    const DeviceClock& c = clocks[size_t(p.device)];
    if (keep && c.valid) {
      const double ts = c.base_us + 1e3 * double(elapsed_ms(c.base, p.events[0]));
      append(Event{'X', p.op_stub != nullptr ? op_name(p.op_stub) : std::move(p.name),
                   p.op_stub != nullptr ? "op" : std::move(p.category), std::move(p.args), ts, 1e3 * ms,
                   stream_track(p.device, p.stream), 0});
    }
    if (p.op_stub != nullptr) {
      void* pair[2] = {p.events[0], p.events[1]};
      op_profile::detail::credit_traced(p.op_stub, p.device, pair, ms);
    } else {
      returned[p.device].push_back(p.events[0]);
      returned[p.device].push_back(p.events[1]);
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  for (int d = 0; d < kMaxDevices; ++d)
    s.pool[size_t(d)].insert(s.pool[size_t(d)].end(), returned[d].begin(), returned[d].end());
}

}  // namespace detail

StreamSpan::StreamSpan(int device, void* stream, std::string_view name, std::string_view category,
                       std::string args_json) {
  if (!enabled()) return;
  detail::check_device(device);
  detail::State& s = detail::state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    events_[0] = detail::take_locked(s, device);
    events_[1] = detail::take_locked(s, device);
  }
  device_ = device;
  stream_ = stream;
  name_ = name;
  category_ = category;
  args_ = std::move(args_json);
  FSDP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[0]), static_cast<cudaStream_t>(stream_)));
}

// A destructor must not throw: a failed record leaves the span out of the trace.
StreamSpan::~StreamSpan() {
  if (device_ < 0) return;
  detail::State& s = detail::state();
  const bool recorded =
      cudaEventRecord(static_cast<cudaEvent_t>(events_[1]), static_cast<cudaStream_t>(stream_)) == cudaSuccess;
  try {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!recorded) {
      (void)cudaGetLastError();
      s.pool[size_t(device_)].push_back(static_cast<cudaEvent_t>(events_[0]));
      s.pool[size_t(device_)].push_back(static_cast<cudaEvent_t>(events_[1]));
      return;
    }
    detail::Pending p;
    p.name = std::move(name_);
    p.category = std::move(category_);
    p.args = std::move(args_);
    p.device = device_;
    p.stream = stream_;
    p.events[0] = static_cast<cudaEvent_t>(events_[0]);
    p.events[1] = static_cast<cudaEvent_t>(events_[1]);
    s.pending.push_back(std::move(p));
  } catch (...) {
  }
}

}  // namespace fsdp::trace
