// Shared helpers for the CPU test suites: seeded random tensors and the finite-difference
// gradient check every op's backward is held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "fsdp/core/tensor.h"

namespace fsdp::test {

inline std::string source_path(const std::string& rel) { return std::string(FSDP_SOURCE_DIR) + "/" + rel; }

// Uniform values in [lo, hi), reproducible from the seed.
inline Tensor random_tensor(const Dims& sizes, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(sizes, dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_flat(i, dist(rng));
  return t;
}

// ||a - b|| / ||b|| over all elements (both any dtype, same numel), the norm-wise relative
// error the golden and backend tests use.
inline double rel_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.get_flat(i), y = b.get_flat(i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Central finite differences of the scalar f() with respect to the elements of x (a
// float64 CPU tensor f reads), compared norm-wise with `analytic` (same shape). For large
// tensors a seeded random subset of at most max_elems elements is probed. Returns
// ||numeric - analytic|| / ||numeric|| over the probed elements.
inline double fd_rel_error(const std::function<double()>& f, const Tensor& x, const Tensor& analytic,
                           double h = 1e-6, int64_t max_elems = 256, uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  const int64_t n = x.numel();
  const bool all = n <= max_elems;
  double num = 0, den = 0;
  for (int64_t k = 0; k < (all ? n : max_elems); ++k) {
    const int64_t i = all ? k : int64_t(rng() % uint64_t(n));
    const double orig = x.get_flat(i);
    x.set_flat(i, orig + h);
    const double fp = f();
    x.set_flat(i, orig - h);
    const double fm = f();
    x.set_flat(i, orig);
    const double numeric = (fp - fm) / (2 * h);
    const double a = analytic.get_flat(i);
    num += (numeric - a) * (numeric - a);
    den += numeric * numeric;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// sum(t * weights) in double: turns an op's tensor output into the scalar a finite
// difference needs; the analytic upstream gradient is then `weights`.
inline double weighted_sum(const Tensor& t, const Tensor& weights) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get_flat(i) * weights.get_flat(i);
  return s;
}

}  // namespace fsdp::test
