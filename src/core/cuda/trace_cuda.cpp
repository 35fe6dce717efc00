// The trace recorder's CUDA half (fsdp/core/trace.h, src/core/trace_recorder.h): base
// events that tie each device's clock to the trace's, device spans (StreamSpan, and the op
// profiler's event pairs adopted while tracing) waiting to be read, and their placement on
// stream tracks. Every timing event is the op profiler's: StreamSpan borrows its pairs from
// the op profiler's pool, and every pair goes back there once read.
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
};

State& state() {
  static State s;
  return s;
}

void check_device(int device) {
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices the trace supports", device,
             kMaxDevices);
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
  for (Pending& p : pending) {
    const cuda::DeviceGuard guard(p.device);
    FSDP_CUDA_CHECK(cudaEventSynchronize(p.events[1]));
    const double ms = elapsed_ms(p.events[0], p.events[1]);
    const DeviceClock& c = clocks[size_t(p.device)];
    if (keep && c.valid) {
      const double ts = c.base_us + 1e3 * double(elapsed_ms(c.base, p.events[0]));
      append(Event{'X', p.op_stub != nullptr ? op_profile::detail::op_name(p.op_stub) : std::move(p.name),
                   p.op_stub != nullptr ? "op" : std::move(p.category), std::move(p.args), ts, 1e3 * ms,
                   stream_track(p.device, p.stream), 0});
    }
    void* pair[2] = {p.events[0], p.events[1]};
    if (p.op_stub != nullptr) {
      op_profile::detail::credit_traced(p.op_stub, p.device, pair, ms);
    } else {
      op_profile::detail::return_pair(p.device, pair);
    }
  }
}

}  // namespace detail

StreamSpan::StreamSpan(int device, void* stream, std::string_view name, std::string_view category,
                       std::string args_json) {
  if (!enabled()) return;
  detail::check_device(device);
  op_profile::detail::lend_pair(device, events_);
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
    if (!recorded) {
      (void)cudaGetLastError();
      op_profile::detail::return_pair(device_, events_);
      return;
    }
    std::lock_guard<std::mutex> lock(s.mu);
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
