// Times training steps of the CPU backend and prints tokens/s and achieved GFLOP/s as a
// ratio of the machine's sgemm peak, measured in the same process with the same BLAS and
// thread settings (so the ratio is "how much of the GEMM ceiling a whole step reaches").
//
//   build/bench/step_bench [steps]        (default 5 timed steps after 2 warm-up steps)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu_step_cases.h"
#include "fsdp/config/config.h"
#include "fsdp/train/trainer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best-of-5 row-major sgemm C = A * B^T at n x n x n.
double sgemm_peak_gflops(int n) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * double(n) * n / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 5;
  const double peak = sgemm_peak_gflops(2048);
  std::printf("sgemm peak (2048^3, this process): %.1f GFLOP/s\n\n", peak);
  std::printf("%-52s %12s %12s %10s %12s\n", "model", "ms/step", "tokens/s", "GFLOP/s", "of sgemm peak");
  for (const bench::StepCase& c : bench::cpu_step_cases()) {
    auto groups = fsdp::dist::local_process_groups();
    const auto cfg = fsdp::config::load_config_string("data:\n  source: synthetic\n", "step_bench", bench::bench_overrides(c));
    fsdp::train::Trainer trainer(cfg, groups);
    for (int i = 0; i < 2; ++i) trainer.train_step();
    double ms = 0, tok = 0, gf = 0;
    for (int i = 0; i < steps; ++i) {
      const auto m = trainer.train_step();
      ms += m.step_ms / steps;
      tok += m.tokens_per_sec / steps;
      gf += m.gflops_per_sec / steps;
    }
    std::printf("%-52s %12.1f %12.0f %10.1f %11.1f%%\n", c.name.c_str(), ms, tok, gf, 100.0 * gf / peak);
  }
  return 0;
}
