// What the collective watchdog costs the collectives of a training step (CPU, MPI).
//
//   mpirun -np 2 build/bench/watchdog_bench [steps]      (also -np 4; bench/README.md)
//
// One "step" is the FULL_SHARD pattern of a model of `units` units of `numel` float32
// parameters: per unit two all-gathers (forward and backward) and one reduce-scatter, then
// the two small all-reduces of the step (the loss votes, the gradient norm). The same
// collectives run with the watchdog off (dist.timeout_s: 0, MPI_Wait) and armed (600 s:
// MPI_Test polled against the deadline, the side communicator probed every millisecond of
// waiting), alternating in rounds so both see the same machine load; rank 0 prints the median
// ms per step of each and their ratio, for a large model's unit size (the tiny preset's is
// small enough that per-call overhead shows) and for small messages, where it shows most.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/dist/watchdog.h"

namespace {

using fsdp::DType;
using fsdp::Tensor;
using fsdp::dist::Communicator;

struct Shape {
  const char* name;
  int units;
  int64_t numel;  // parameters per unit
};

double step_ms(Communicator& c, const Shape& s, int steps) {
  const int64_t n = s.numel / c.size();
  Tensor shard = Tensor::zeros({n}, DType::F32), full = Tensor::zeros({n * c.size()}, DType::F32);
  Tensor grad = Tensor::zeros({n * c.size()}, DType::F32), votes = Tensor::zeros({7}, DType::F64);
  Tensor norm = Tensor::zeros({1}, DType::F64);
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < steps; ++k) {
    for (int u = 0; u < s.units; ++u) c.wait(c.all_gather(shard, full));  // forward
    for (int u = 0; u < s.units; ++u) {
      c.wait(c.all_gather(shard, full));  // backward
      c.wait(c.reduce_scatter(grad, shard));
    }
    c.wait(c.all_reduce(votes));
    c.wait(c.all_reduce(norm));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  // Every rank reports rank 0's view of the slowest: the step ends when the last rank's does.
  Tensor t = Tensor::zeros({1}, DType::F64);
  t.data<double>()[0] = ms;
  Tensor all = Tensor::zeros({c.size()}, DType::F64);
  c.wait(c.all_gather(t, all));
  return *std::max_element(all.data<double>(), all.data<double>() + c.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  fsdp::dist::ProcessGroups g = fsdp::dist::init_process_groups(0);
  Communicator& world = *g.world;
  const bool rank0 = world.rank() == 0;
  if (world.size() < 2 && rank0) std::printf("(one rank: collectives do not wait; run under mpirun -np 2 or 4)\n");
  const Shape shapes[] = {{"tiny preset units (6 x 0.18M params)", 6, 184576},
                          {"small messages (32 x 4096 params)", 32, 4096}};
  if (rank0) {
    std::printf("watchdog cost per step of FULL_SHARD collectives, %d ranks, median of 5 rounds of %d steps\n\n",
                world.size(), steps);
    std::printf("%-40s %14s %14s %10s\n", "pattern", "off ms/step", "armed ms/step", "armed/off");
  }
  const fsdp::dist::WatchdogOptions saved = fsdp::dist::watchdog_options();
  for (const Shape& s : shapes) {
    std::vector<double> off, armed;
    step_ms(world, s, 2);  // warm-up: buffers, connections
    for (int round = 0; round < 5; ++round) {
      fsdp::dist::configure_watchdog({0.0});
      off.push_back(step_ms(world, s, steps));
      fsdp::dist::configure_watchdog({600.0});
      armed.push_back(step_ms(world, s, steps));
    }
    if (rank0)
      std::printf("%-40s %14.3f %14.3f %9.3fx\n", s.name, median(off), median(armed), median(armed) / median(off));
  }
  fsdp::dist::configure_watchdog(saved);
  fsdp::dist::shutdown_distributed();
  return 0;
}
