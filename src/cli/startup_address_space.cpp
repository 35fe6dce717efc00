// Start-up under a small address-space limit (`ulimit -v`, RLIMIT_AS): refused in one line with
// exit code 2 before the libraries initialise, instead of hanging.
//
// Why here and this early. OpenBLAS (the CPU backend's BLAS) reserves a 128 MiB buffer per
// thread from its library constructor, before main, and again for each thread that first
// calls a GEMM; when mmap fails under RLIMIT_AS it retries forever, silently, ignoring SIGTERM.
// So the check runs from the executable's .preinit_array, which the loader calls before any
// shared library's constructor: it counts what is mapped already (the binary and its libraries)
// plus OpenBLAS's buffers for its threads (one per thread, and one more for the first GEMM
// outside a parallel region), their stacks and a margin, and refuses when the limit is below
// that, naming the numbers and what to change. A limit that passes here is then held to the
// whole run's needs by the start-up memory check (fsdp/plan/memory_check.h), which counts the
// same reservations (plan/host_memory.h, address_space_outside_tensors).
//
// Plain libc only: the C++ runtime has not initialised yet. Built into fsdp_train itself (not
// the cli library: an unreferenced object of a static library would be dropped).
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// OpenBLAS 0.3's BUFFER_SIZE on x86_64 (common_x86_64.h: 32 << 22), per thread that calls it.
constexpr double kBlasBufferBytes = 128 * kMiB;
constexpr double kThreadStackBytes = 8 * kMiB;  // glibc's default, RLIMIT_STACK's usual 8 MiB
constexpr double kMarginBytes = 64 * kMiB;      // what the libraries' constructors allocate besides
constexpr int kBlasMaxThreads = 64;             // Debian's OpenBLAS is built for at most 64

long env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  const long n = std::strtol(v, nullptr, 10);  // OMP_NUM_THREADS may be a list: its first level
  return n > 0 ? n : 0;
}

// The threads OpenBLAS starts with: OPENBLAS_NUM_THREADS, else OpenMP's (OMP_NUM_THREADS, else
// the CPUs this process may run on).
long blas_threads() {
  long n = env_threads("OPENBLAS_NUM_THREADS");
  if (n == 0) n = env_threads("OMP_NUM_THREADS");
  if (n == 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  }
  return n < 1 ? 1 : n > kBlasMaxThreads ? kBlasMaxThreads : n;
}

// Bytes of address space mapped now (/proc/self/statm's first field, in pages).
double mapped_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0;
  const int got = std::fscanf(f, "%ld", &pages);
  std::fclose(f);
  return got == 1 ? double(pages) * double(sysconf(_SC_PAGESIZE)) : 0;
}

void check_address_space(int, char**, char**) {
  rlimit r{};
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return;
  const long threads = blas_threads();
  const double mapped = mapped_bytes();
  const double need =
      mapped + double(threads + 1) * kBlasBufferBytes + double(threads) * kThreadStackBytes + kMarginBytes;
  const double limit = double(r.rlim_cur);
  if (limit >= need) return;
  const double one_thread = mapped + 2 * kBlasBufferBytes + kThreadStackBytes + kMarginBytes;
  std::fprintf(stderr,
               "error: rank memory: fsdp_train needs about %.0f MiB of address space to start but RLIMIT_AS (ulimit "
               "-v) allows %.0f MiB (over by %.0f MiB): %.0f MiB mapped by the program and its libraries, and "
               "OpenBLAS reserves a %.0f MiB buffer for each of its %ld thread(s) and one more; raise the limit "
               "(ulimit -v %.0f, or unlimited)%s\n",
               need / kMiB, limit / kMiB, (need - limit) / kMiB, mapped / kMiB, kBlasBufferBytes / kMiB, threads,
               std::ceil(need / 1024), threads > 1 && limit >= one_thread ? ", or run with OMP_NUM_THREADS=1" : "");
  std::fflush(stderr);
  _exit(2);
}

}  // namespace

// The loader calls .preinit_array entries of the executable before every shared library's
// initialiser (glibc: _dl_init), with argc, argv and envp.
__attribute__((section(".preinit_array"), used)) void (*const fsdp_check_address_space)(int, char**,
                                                                                       char**) = &check_address_space;
