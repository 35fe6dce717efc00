// What tracing costs a CPU training step (fsdp/core/trace.h), as two ratios:
//   off: the cost of the recorder's hooks while not recording (one relaxed load and a
//        branch per span site), times the span sites a step passes, over the step time,
//        against a 1% ceiling: "none measurable" means far below the run-to-run noise of a
//        step, which this bench also prints;
//   on:  ms/step while recording over ms/step while not, interleaved round by round so
//        that drift (thermal, other processes) hits both alike; as wall time and as the
//        process's CPU time (std::clock), which other processes on a shared machine disturb
//        far less than they disturb wall time.
//
//   OMP_NUM_THREADS=1 build/bench/trace_bench [rounds]   (default 5 rounds of 3 steps each way)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu_step_cases.h"
#include "fsdp/config/config.h"
#include "fsdp/core/nvtx.h"
#include "fsdp/core/trace.h"
#include "fsdp/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ns per disabled span site: a trace::Span and an NVTX range (what the engine's hooks and
// the trainer's spans are), both with recording off.
double off_ns_per_site() {
  constexpr int kN = 20'000'000;
  volatile int sink = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < kN; ++i) {
    const fsdp::trace::Span s("step", "step", "step", i);
    sink = sink + 1;
  }
  const double span_ns = seconds_since(t0) / kN * 1e9;
  const auto t1 = Clock::now();
  for (int i = 0; i < kN; ++i) {
    fsdp::nvtx::push("layers.0 forward");
    sink = sink + 1;
    fsdp::nvtx::pop();
  }
  const double nvtx_ns = seconds_since(t1) / kN * 1e9;
  return std::max(span_ns, nvtx_ns);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 5;
  constexpr int kStepsPerRound = 3;
  const double site_ns = off_ns_per_site();
  std::printf("a span site with tracing off: %.2f ns (the worse of trace::Span and an NVTX range)\n\n", site_ns);
  for (const bench::StepCase& c : bench::cpu_step_cases()) {
    auto groups = fsdp::dist::local_process_groups();
    const auto cfg = fsdp::config::load_config_string("data:\n  source: synthetic\n", "trace_bench", bench::bench_overrides(c));
    fsdp::train::Trainer trainer(cfg, groups);
    for (int i = 0; i < 2; ++i) trainer.train_step();  // first-step allocations
    std::vector<double> off, on, spread, cpu_off, cpu_on;
    double events_per_step = 0;
    // One step: its wall ms into `wall`, its CPU ms into `cpu`.
    auto timed_step = [&](std::vector<double>& wall, std::vector<double>& cpu) {
      const auto t0 = Clock::now();
      const std::clock_t c0 = std::clock();
      trainer.train_step();
      cpu.push_back(1e3 * double(std::clock() - c0) / CLOCKS_PER_SEC);
      wall.push_back(seconds_since(t0) * 1e3);
    };
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> round_off;
      for (int s = 0; s < kStepsPerRound; ++s) timed_step(round_off, cpu_off);
      fsdp::trace::start();
      for (int s = 0; s < kStepsPerRound; ++s) timed_step(on, cpu_on);
      fsdp::trace::stop();
      events_per_step = double(fsdp::trace::num_events()) / kStepsPerRound;
      fsdp::trace::clear();
      off.insert(off.end(), round_off.begin(), round_off.end());
      spread.push_back(median(round_off));
    }
    const double off_ms = median(off), on_ms = median(on);
    // Every recorded event is one site passed (ops included, whose hook predates the
    // trace: an upper bound on what the trace added).
    const double off_cost_ms = events_per_step * site_ns * 1e-6;
    const auto [lo, hi] = std::minmax_element(spread.begin(), spread.end());
    std::printf("%s\n", c.name.c_str());
    const double cpu_ms = median(cpu_off);
    std::printf("  off: %.0f span sites per step x %.2f ns = %.4f ms, %.5f%% of the step's %.2f ms of CPU time "
                "(ceiling 1%%); spread of the step's wall time across rounds: %.1f%%\n",
                events_per_step, site_ns, off_cost_ms, 100.0 * off_cost_ms / cpu_ms, cpu_ms,
                100.0 * (*hi - *lo) / off_ms);
    std::printf("  on:  %.2f ms/step recording vs %.2f ms/step not: %.3fx wall; CPU time %.2f vs %.2f ms: %.3fx "
                "(%.0f events per step)\n\n",
                on_ms, off_ms, on_ms / off_ms, median(cpu_on), median(cpu_off), median(cpu_on) / median(cpu_off),
                events_per_step);
  }
  return 0;
}
