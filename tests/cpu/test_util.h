// Shared helpers for the test suites (tests/cpu and tests/mpi): seeded random tensors, the
// finite-difference gradient check every op's backward is held to, the "throws an
// fsdp::Error that says X" check, and running a computation under several OpenMP thread
// counts for the tests that demand the same bits from each.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"

namespace fsdp::test {

// A command run through the shell: its exit code (-1 if it did not exit) and its stdout
// and stderr together, kept in `log`.
struct CommandResult {
  int code = -1;
  std::string out;
};
inline CommandResult run_command(const std::string& command, const std::string& log) {
  const int status = std::system((command + " > " + log + " 2>&1").c_str());
  CommandResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

inline std::string source_path(const std::string& rel) { return std::string(FSDP_SOURCE_DIR) + "/" + rel; }

#if defined(FSDP_TRAIN_BIN)
// `fsdp_train args`, its output through a scratch log named after `name` and this process
// (removed after).
inline CommandResult run_fsdp_train(const std::string& args, const std::string& name) {
  const std::string log =
      (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".log")).string();
  CommandResult r = run_command(std::string(FSDP_TRAIN_BIN) + " " + args, log);
  std::filesystem::remove(log);
  return r;
}
#endif

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

// A 1-D tensor of `dtype` with element i = f(i).
inline Tensor filled(DType dtype, int64_t n, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.set_flat(i, f(i));
  return t;
}

// A 1-D integer (or float) tensor holding `values`: token ids, targets.
inline Tensor index_tensor(const std::vector<int64_t>& values, DType dtype) {
  return filled(dtype, int64_t(values.size()), [&](int64_t i) { return double(values[size_t(i)]); });
}

// The message of what f throws ("(no error)" when it returns), for exact comparisons.
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Runs f, which must throw fsdp::Error whose message contains every one of `parts`.
// `what`, when given, names the statement in the failure message.
inline void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts,
                         const char* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "no fsdp::Error thrown" << (what != nullptr ? std::string(" from ") + what : std::string())
                << "; expected one mentioning '" << (parts.size() > 0 ? *parts.begin() : std::string()) << "'";
}

// Runs f, which must throw fsdp::Error whose what() (the user's line) contains every one of
// `in_what` and no source location, and whose where() (the debug log's) contains every one
// of `in_where` (e.g. the file:line that raised it).
inline void expect_error_from(const std::function<void()>& f, std::initializer_list<std::string> in_what,
                              std::initializer_list<std::string> in_where) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what(), where = e.where();
    for (const std::string& p : in_what) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    for (const std::string& p : in_where)
      EXPECT_NE(where.find(p), std::string::npos) << "'" << p << "' not in where(): " << where;
    EXPECT_EQ(what.find(".cpp:"), std::string::npos) << "a source location in what(): " << what;
    return;
  }
  ADD_FAILURE() << "no fsdp::Error thrown";
}

// expect_error for one statement whose text goes into the failure message.
#define EXPECT_ERROR_MENTIONS(stmt, text) ::fsdp::test::expect_error([&] { stmt; }, {text}, #stmt)

// Sets the OpenMP thread count for its lifetime, restoring the previous one after.
struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
};

// f() under 1, 2 and 3 OpenMP threads (3 does not divide most work evenly), one result
// per count, for comparing bit for bit.
template <typename F>
auto under_thread_counts(F&& f) {
  std::vector<decltype(f())> results;
  for (int threads : {1, 2, 3}) {
    ThreadCount tc(threads);
    results.push_back(f());
  }
  return results;
}

// True when a and b hold the same bytes (same dtype and size; any strides).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.clone(), cb = b.clone();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace fsdp::test
