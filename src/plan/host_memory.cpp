// The host's memory limits and byte-size parsing; see host_memory.h.
#include "fsdp/plan/host_memory.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "fsdp/core/error.h"

namespace fsdp::plan {
namespace {

void take(HostMemory& m, double bytes, const std::string& source, bool node_wide) {
  if (bytes > 0 && bytes < m.bytes) m = HostMemory{bytes, source, node_wide};
}

double meminfo_total() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024;
  return 0;
}

// A cgroup limit file's value ("max" or a huge v1 number = none).
double read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v) || v == "max") return 0;
  const double x = std::strtod(v.c_str(), nullptr);
  return x >= 1e18 ? 0 : x;
}

// The tightest memory limit on this process's cgroup and its ancestors.
void take_cgroup(HostMemory& m) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    const bool v1 = controllers.find("memory") != std::string::npos;
    if (!v2 && !v1) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const std::string file = v2 ? "memory.max" : "memory.limit_in_bytes";
    const std::string source = v2 ? "cgroup memory.max" : "cgroup memory.limit_in_bytes";
    while (true) {
      take(m, read_limit(root + (path == "/" ? "" : path) + "/" + file), source + " (" + (path.empty() ? "/" : path) + ")",
           true);
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
}

void take_rlimit(HostMemory& m, int resource, const char* name) {
  rlimit r{};
  if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    take(m, double(r.rlim_cur), name, false);
    if (m.source == name) m.address_space = resource == RLIMIT_AS;
  }
}

constexpr double kMiB = 1024.0 * 1024.0;
// The constants of the file comment in host_memory.h (and of src/cli/startup_address_space.cpp,
// which refuses a limit too small for OpenBLAS's start-up before main).
constexpr double kBlasBufferBytes = 128 * kMiB;  // OpenBLAS 0.3's BUFFER_SIZE on x86_64
constexpr double kArenaBytes = 64 * kMiB;        // glibc's HEAP_MAX_SIZE on 64-bit
constexpr double kStackBytes = 8 * kMiB;
constexpr double kMarginBytes = 64 * kMiB;

double mapped_bytes() {
  std::ifstream f("/proc/self/statm");
  double pages = 0;
  if (!(f >> pages)) return 0;
  return pages * double(sysconf(_SC_PAGESIZE));
}

int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  const long n = std::strtol(v, nullptr, 10);  // OMP_NUM_THREADS may be a list: its first level
  return n > 0 && n < 4096 ? int(n) : 0;
}

}  // namespace

HostMemory host_memory_limit(int divide_among) {
  const double share = std::max(divide_among, 1);
  HostMemory m{INFINITY, "no limit found", false};
  take(m, meminfo_total() / share, "physical memory", true);
  HostMemory node{INFINITY, "", true};
  take_cgroup(node);
  if (std::isfinite(node.bytes)) take(m, node.bytes / share, node.source, true);
  take_rlimit(m, RLIMIT_AS, "RLIMIT_AS (ulimit -v)");
  take_rlimit(m, RLIMIT_DATA, "RLIMIT_DATA (ulimit -d)");
  return m;
}

int compute_threads() {
  int n = env_threads("OPENBLAS_NUM_THREADS");
  if (n == 0) n = env_threads("OMP_NUM_THREADS");
  if (n == 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(sysconf(_SC_NPROCESSORS_ONLN));
  }
  return std::max(n, 1);
}

AddressSpace address_space_outside_tensors(int threads, int loader_workers) {
  threads = std::clamp(threads, 1, 64);  // Debian's OpenBLAS runs at most 64 threads
  const double mapped = mapped_bytes();
  const double blas = double(threads) * kBlasBufferBytes;
  const int new_threads = (threads - 1) + std::max(loader_workers, 0) + 1;
  const double per_thread = double(new_threads) * (kArenaBytes + kStackBytes);
  AddressSpace a;
  a.bytes = mapped + blas + per_thread + kMarginBytes;
  a.detail = fmt::format("RLIMIT_AS counts reservations: {:.0f} MiB mapped now, OpenBLAS's second {:.0f} MiB buffer "
                         "for each of {} compute thread(s), a malloc arena and a stack for each of {} more thread(s), "
                         "{:.0f} MiB margin",
                         mapped / kMiB, kBlasBufferBytes / kMiB, threads, new_threads, kMarginBytes / kMiB);
  return a;
}

double parse_bytes(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  double value = 0;
  std::string unit;
  const bool number = bool(in >> value);
  in >> unit;
  std::string rest;
  const bool clean = !(in >> rest);
  struct Unit {
    const char* name;
    double scale;
  };
  // No bare numbers: `--device-memory 80` meant 80 GB, not 80 bytes.
  static const Unit kUnits[] = {{"B", 1},         {"kB", 1e3},      {"KB", 1e3},
                                {"MB", 1e6},      {"GB", 1e9},      {"TB", 1e12},     {"KiB", 1024.0},
                                {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
                                {"K", 1024.0},    {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0}};
  if (number && clean && std::isfinite(value) && value > 0) {
    for (const Unit& u : kUnits)
      if (unit == u.name) return value * u.scale;
  }
  FSDP_FAIL("{} '{}' is not a size: write a positive number and its unit, e.g. 80GB (8e10 bytes), 80GiB or 80G "
            "(80 x 2^30), 512MiB, or 8e9B (bytes)",
            what, text);
}

}  // namespace fsdp::plan
