// sgemm_compare.cpp — time row-major fp32 GEMM in one BLAS, so the project can choose one.
//
// Compile once per library (run.sh does this); exactly one of:
//   -DUSE_OPENBLAS  include <cblas.h> from .../openblas-{pthread,openmp}/, link libopenblas.so.0
//   -DUSE_BLIS      include <cblas.h> from .../blis-{pthread,openmp}/,     link libblis.so.4
//   -DUSE_DNNL      include <oneapi/dnnl/dnnl.h>,                           link libdnnl.so.2
// Always link the library file by its full path, never the libblas.so.3 alternative.
// Build with -fopenmp: the --interleave mode runs an OpenMP loop between GEMMs, the way the
// CPU backend does (OpenMP row kernels + BLAS), to expose thread-pool contention.
//
// Ops (row-major, C is M x N, beta = 0):
//   NT: C = A * B^T   A: M x K, B: N x K   (forward:  y = x W^T, W stored [out, in])
//   NN: C = A * B     A: M x K, B: K x N   (backward: dx = dy W)
//   TN: C = A^T * B   A: K x M, B: K x N   (backward: dW = dy^T x; not in the default set,
//                                           use --shapes wgrad --ops TN)
//
// Output: one "# ..." header block (library, version, kernel/arch, threads), then one
//   RESULT <lib> <shape> <op> <M> <N> <K> <gflops> <relerr> <OK|FAIL> [<extra>]
// line per case.  A case whose sampled result differs from a double-precision reference by
// more than --tol (normwise relative, on a sub-block) is reported FAIL with gflops 0, so a
// broken kernel can never come out fastest.
//
// Options:
//   --threads N     set the library's thread count through its API (default 2);
//                   0 = do not touch it, let the environment decide (for the thread-variable check)
//   --shapes LIST   comma list of: square, llama, wgrad, or single names (512,1024,2048,4096,
//                   qkvo,up,down,head, wg_qkvo,wg_up,wg_down,wg_head); default square,llama
//   --ops LIST      NT,NN,TN (default NT,NN)
//   --reps N        timed repetitions, best is reported (default 5; plus one warm-up)
//   --min-time S    keep repeating until S seconds were spent in the timed loop (default 1.0)
//   --max-time S    ...and, up to S seconds, until one run was not slowed by other processes
//                   (its threads waited for a CPU < 2% of the time; default 5 x min-time)
//   --wait-idle S   before timing a case, wait up to S seconds until other processes leave the
//                   CPUs (< 10% busy over 0.5 s); if its best run was still slowed, wait and time it
//                   again, up to 3 times (default 0 = never wait)
//   --tol X         relative-error limit (default 1e-4)
//   --interleave    time {OpenMP elementwise pass over C; sgemm} pairs instead of sgemm alone and
//                   report the pair's overhead over (sgemm alone + elementwise alone)
//   --label S       library label printed in RESULT lines (default: built-in name)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <omp.h>

#if defined(USE_OPENBLAS) + defined(USE_BLIS) + defined(USE_DNNL) != 1
#error "define exactly one of USE_OPENBLAS, USE_BLIS, USE_DNNL"
#endif

#if defined(USE_OPENBLAS)
#include <cblas.h>
static const char* kLib = "openblas";
#elif defined(USE_BLIS)
#include <blis.h>  // bli_* info/threading API; its cblas.h comes with it (BLIS_ENABLE_CBLAS)
#include <cblas.h>
static const char* kLib = "blis";
#elif defined(USE_DNNL)
#include <oneapi/dnnl/dnnl.h>
static const char* kLib = "onednn";
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  std::string name;
  long m, n, k;
};

struct Options {
  int threads = 2;
  std::vector<Shape> shapes;
  std::vector<std::string> ops{"NT", "NN"};
  int reps = 5;
  double min_time = 1.0;
  double max_time = -1;  // < 0: 5 x min_time
  double tol = 1e-4;
  bool interleave = false;
  double wait_idle = 0;
  std::string label = kLib;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// The shapes one Llama training step uses on the CPU demo model (dim 512, ffn 1536,
// vocab 32000), 4096 tokens per step.
void add_shapes(const std::string& what, std::vector<Shape>& out) {
  const Shape square[] = {{"sq512", 512, 512, 512},
                          {"sq1024", 1024, 1024, 1024},
                          {"sq2048", 2048, 2048, 2048},
                          {"sq4096", 4096, 4096, 4096}};
  const Shape llama[] = {{"qkvo", 4096, 512, 512},
                         {"up", 4096, 1536, 512},
                         {"down", 4096, 512, 1536},
                         {"head", 4096, 32000, 512}};
  // Weight gradients of the same layers: dW[out, in] = dy^T[out, tokens] x[tokens, in].
  const Shape wgrad[] = {{"wg_qkvo", 512, 512, 4096},
                         {"wg_up", 1536, 512, 4096},
                         {"wg_down", 512, 1536, 4096},
                         {"wg_head", 32000, 512, 4096}};
  if (what == "wgrad") {
    out.insert(out.end(), std::begin(wgrad), std::end(wgrad));
    return;
  }
  for (const Shape& s : wgrad)
    if (what == s.name) {
      out.push_back(s);
      return;
    }
  if (what == "square") {
    out.insert(out.end(), std::begin(square), std::end(square));
    return;
  }
  if (what == "llama") {
    out.insert(out.end(), std::begin(llama), std::end(llama));
    return;
  }
  for (const Shape& s : square)
    if (what == s.name || what == s.name.substr(2)) {
      out.push_back(s);
      return;
    }
  for (const Shape& s : llama)
    if (what == s.name) {
      out.push_back(s);
      return;
    }
  std::fprintf(stderr, "unknown shape '%s'\n", what.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string shapes = "square,llama";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") o.threads = std::atoi(need("--threads").c_str());
    else if (a == "--shapes") shapes = need("--shapes");
    else if (a == "--ops") o.ops = split(need("--ops"));
    else if (a == "--reps") o.reps = std::max(1, std::atoi(need("--reps").c_str()));
    else if (a == "--min-time") o.min_time = std::atof(need("--min-time").c_str());
    else if (a == "--max-time") o.max_time = std::atof(need("--max-time").c_str());
    else if (a == "--wait-idle") o.wait_idle = std::atof(need("--wait-idle").c_str());
    else if (a == "--tol") o.tol = std::atof(need("--tol").c_str());
    else if (a == "--interleave") o.interleave = true;
    else if (a == "--label") o.label = need("--label");
    else {
      std::fprintf(stderr, "unknown option '%s' (see the comment at the top of the source)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  if (o.max_time < 0) o.max_time = 5 * o.min_time;
  for (const std::string& s : split(shapes)) add_shapes(s, o.shapes);
  for (const std::string& op : o.ops)
    if (op != "NT" && op != "NN" && op != "TN") {
      std::fprintf(stderr, "unknown op '%s' (NT, NN or TN)\n", op.c_str());
      std::exit(2);
    }
  return o;
}

// Row-major C[M,N] = op(A) * op(B), beta = 0; A is A[M,K] or (trans_a) A[K,M], B is B[K,N] or
// (trans_b) B[N,K].
void sgemm(bool trans_a, bool trans_b, long m, long n, long k, const float* a, const float* b,
           float* c) {
  const long lda = trans_a ? m : k, ldb = trans_b ? k : n;
#if defined(USE_OPENBLAS) || defined(USE_BLIS)
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
              (int)ldb, 0.0f, c, (int)n);
#else
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda,
                                b, ldb, 0.0f, c, n);
  if (st != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed: status %d\n", (int)st);
    std::exit(1);
  }
#endif
}

void set_threads(int n) {
  if (n <= 0) return;
#if defined(USE_OPENBLAS)
  openblas_set_num_threads(n);
#elif defined(USE_BLIS)
  bli_thread_set_num_threads(n);
#endif
  // oneDNN (Debian: OpenMP runtime) and the OpenMP builds of OpenBLAS/BLIS size their parallel
  // regions from OpenMP; the --interleave loop uses it too.
  omp_set_num_threads(n);
}

// Threads the library reports it will use (-1 where it has no such query).
int library_threads() {
#if defined(USE_OPENBLAS)
  return openblas_get_num_threads();
#elif defined(USE_BLIS)
  return (int)bli_thread_get_num_threads();
#else
  return omp_get_max_threads();
#endif
}

void print_header(const Options& o) {
  std::printf("# library   %s (label %s)\n", kLib, o.label.c_str());
#if defined(USE_OPENBLAS)
  std::printf("# version   %s\n", openblas_get_config());
  std::printf("# kernel    %s\n", openblas_get_corename());
  std::printf("# parallel  %s\n", openblas_get_parallel() == 0   ? "serial"
                                  : openblas_get_parallel() == 1 ? "pthreads"
                                                                 : "openmp");
#elif defined(USE_BLIS)
  std::printf("# version   BLIS %s\n", bli_info_get_version_str());
  std::printf("# kernel    %s\n", bli_arch_string(bli_arch_query_id()));
  std::printf("# parallel  %s\n", bli_info_get_enable_openmp()    ? "openmp"
                                  : bli_info_get_enable_pthreads() ? "pthreads"
                                                                   : "serial");
#else
  const dnnl_version_t* v = dnnl_version();
  std::printf("# version   oneDNN %d.%d.%d (%s)\n", v->major, v->minor, v->patch, v->hash);
  const int isa = (int)dnnl_get_effective_cpu_isa();
  std::printf("# kernel    effective ISA 0x%x%s\n", isa,
              isa == (int)dnnl_cpu_isa_avx512_core_amx     ? " (avx512_core_amx)"
              : isa == (int)dnnl_cpu_isa_avx512_core_bf16 ? " (avx512_core_bf16)"
              : isa == (int)dnnl_cpu_isa_avx512_core_vnni ? " (avx512_core_vnni)"
              : isa == (int)dnnl_cpu_isa_avx512_core      ? " (avx512_core)"
              : isa == (int)dnnl_cpu_isa_avx2             ? " (avx2)"
                                                          : "");
  std::printf("# parallel  %s\n", v->cpu_runtime == DNNL_RUNTIME_OMP ? "openmp" : "other");
#endif
  std::printf("# threads   requested %s, library reports %d, omp_get_max_threads %d\n",
              o.threads > 0 ? std::to_string(o.threads).c_str() : "env", library_threads(),
              omp_get_max_threads());
  for (const char* var : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
                          "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"}) {
    const char* val = std::getenv(var);
    std::printf("# env       %s=%s\n", var, val ? val : "(unset)");
  }
  std::fflush(stdout);
}

void fill_random(std::vector<float>& v, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : v) x = dist(gen);
}

// Normwise relative error of C on a sampled sub-block (up to 48 rows x 48 columns, spread over
// the whole matrix and including the last row and column) against a double-precision reference.
double check(bool trans_a, bool trans_b, long m, long n, long k, const float* a,
             const float* b, const float* c) {
  const long rows = std::min<long>(m, 48), cols = std::min<long>(n, 48);
  double err2 = 0, ref2 = 0;
  for (long ri = 0; ri < rows; ++ri) {
    const long i = rows == 1 ? 0 : ri * (m - 1) / (rows - 1);
    for (long ci = 0; ci < cols; ++ci) {
      const long j = cols == 1 ? 0 : ci * (n - 1) / (cols - 1);
      double ref = 0;
      for (long p = 0; p < k; ++p)
        ref += (double)(trans_a ? a[p * m + i] : a[i * k + p]) *
               (double)(trans_b ? b[j * k + p] : b[p * n + j]);
      const double got = c[i * n + j];
      if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
}

// The OpenMP pass used by --interleave: one cheap elementwise op over C (like a SiLU/residual
// kernel in the CPU backend), parallel over rows.
void omp_elementwise(float* c, long m, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < m; ++i) {
    float* row = c + i * n;
    for (long j = 0; j < n; ++j) row[j] = row[j] * 0.5f + 1.0f;
  }
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds this process's threads have spent runnable but waiting for a CPU, i.e. while another
// process had it (field 2 of /proc/self/task/*/schedstat; 0 where the kernel has no schedstat).
// On a shared 2-core machine this tells a clean timing from one another job slowed down.
double run_delay_s() {
  double total = 0;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      unsigned long long on_cpu = 0, waiting = 0;
      if (std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2) total += waiting * 1e-9;
      std::fclose(f);
    }
  }
  closedir(dir);
  return total;
}

struct Timing {
  double best = std::numeric_limits<double>::infinity();  // seconds, fastest run
  double wait = 0;  // CPU-wait share of the fastest run (waiting seconds / its wall seconds)
  int runs = 0;
};

// Fastest of fn() after one warm-up, over at least --reps runs and --min-time seconds; then
// keep going (up to --max-time) until some run was clean (CPU wait < 2% of its wall time).
// Another process can only slow a run down, so the minimum is the estimate either way.
template <class F>
Timing best_time(const Options& o, F&& fn) {
  fn();  // warm-up: thread pools, packing buffers, page faults
  Timing t;
  double total = 0;
  bool clean = false;
  while (t.runs < o.reps || total < o.min_time || (!clean && total < o.max_time)) {
    const double w0 = run_delay_s();
    const auto t0 = Clock::now();
    fn();
    const double dt = seconds_since(t0);
    const double wait = (run_delay_s() - w0) / dt;
    if (wait < 0.02) clean = true;
    if (dt < t.best) {
      t.best = dt;
      t.wait = wait;
    }
    total += dt;
    if (++t.runs >= 100000) break;
  }
  return t;
}

// Busy share of all CPUs over `seconds`, from /proc/stat (we run nothing meanwhile).
double cpu_busy_share(double seconds) {
  auto read = [](unsigned long long& busy, unsigned long long& total) {
    busy = total = 0;
    if (FILE* f = std::fopen("/proc/stat", "r")) {
      unsigned long long v[8] = {};
      if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                      &v[4], &v[5], &v[6], &v[7]) == 8) {
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
        total = busy + v[3] + v[4];                       // + idle iowait
      }
      std::fclose(f);
    }
  };
  unsigned long long b0, t0, b1, t1;
  read(b0, t0);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  read(b1, t1);
  return t1 > t0 ? double(b1 - b0) / double(t1 - t0) : 0.0;
}

void wait_for_idle_cpus(double max_wait_s) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < max_wait_s && cpu_busy_share(0.5) >= 0.10) {
  }
}

// best_time, gated on an idle machine and retried while its best run was slowed by others.
template <class F>
Timing timed(const Options& o, F&& fn) {
  Timing best;
  for (int attempt = 0; attempt < (o.wait_idle > 0 ? 3 : 1); ++attempt) {
    if (o.wait_idle > 0) wait_for_idle_cpus(o.wait_idle);
    const Timing t = best_time(o, fn);
    if (t.best < best.best) best = Timing{t.best, t.wait, best.runs + t.runs};
    else best.runs += t.runs;
    if (best.wait < 0.05) break;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  set_threads(o.threads);
  print_header(o);

  int failures = 0;
  for (const Shape& s : o.shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    fill_random(a, 1234 + s.m * 7 + s.k);
    fill_random(b, 5678 + s.n * 11 + s.k);
    const double flops = 2.0 * s.m * s.n * s.k;
    for (const std::string& op : o.ops) {
      const bool trans_a = op[0] == 'T', trans_b = op[1] == 'T';
      // beta = 0 must not read C: poison it so a library that computes 0 * C fails the check.
      std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
      sgemm(trans_a, trans_b, s.m, s.n, s.k, a.data(), b.data(), c.data());
      const double relerr = check(trans_a, trans_b, s.m, s.n, s.k, a.data(), b.data(), c.data());
      const bool ok = relerr <= o.tol;
      if (!ok) ++failures;

      auto gemm = [&] { sgemm(trans_a, trans_b, s.m, s.n, s.k, a.data(), b.data(), c.data()); };
      const Timing t_gemm = timed(o, gemm);
      double gflops = ok ? flops / t_gemm.best * 1e-9 : 0.0;
      char extra[200];
      std::snprintf(extra, sizeof extra, "runs=%d wait=%.1f%%", t_gemm.runs, t_gemm.wait * 100);
      if (o.interleave) {
        // Time {elementwise pass; sgemm} pairs and the pass alone; report the sgemm's GFLOP/s
        // inside the pair (pair time minus pass time) and the pair's overhead over the parts.
        const Timing t_elem = timed(o, [&] { omp_elementwise(c.data(), s.m, s.n); });
        const Timing t_pair = timed(o, [&] {
          omp_elementwise(c.data(), s.m, s.n);
          gemm();
        });
        const double overhead = t_pair.best / (t_gemm.best + t_elem.best) - 1.0;
        gflops = ok ? flops / (t_pair.best - t_elem.best) * 1e-9 : 0.0;
        std::snprintf(extra, sizeof extra,
                      "gemm_ms=%.3f elem_ms=%.3f pair_ms=%.3f wait=%.1f%% overhead=%+.1f%%",
                      t_gemm.best * 1e3, t_elem.best * 1e3, t_pair.best * 1e3,
                      std::max({t_gemm.wait, t_elem.wait, t_pair.wait}) * 100, overhead * 100);
      }
      std::printf("RESULT %s %s %s %ld %ld %ld %.1f %.2e %s %s\n", o.label.c_str(), s.name.c_str(),
                  op.c_str(), s.m, s.n, s.k, gflops, relerr, ok ? "OK" : "FAIL", extra);
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}
