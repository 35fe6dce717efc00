// How much memory a CPU training process may use, and byte sizes as people write them.
#pragma once

#include <string>

namespace fsdp::plan {

struct HostMemory {
  double bytes = 0;
  std::string source;  // which limit it is: "physical memory", "cgroup memory.max", "RLIMIT_AS", ...
  bool node_wide = false;  // the node's (physical, cgroup: shared by its ranks), not the process's own
  bool address_space = false;  // RLIMIT_AS: it counts address space reserved, not memory used
};

// The smallest of: physical memory (/proc/meminfo MemTotal), the cgroup's limit (v2
// memory.max, v1 memory.limit_in_bytes, of this process's cgroup and its ancestors), and
// the process limits RLIMIT_AS (`ulimit -v`) and RLIMIT_DATA. The first two are the node's,
// shared by every rank on it; the rlimits are each process's own (divide_among says how
// many ranks share the node's).
HostMemory host_memory_limit(int divide_among = 1);

// What RLIMIT_AS (`ulimit -v`) counts of a CPU training process besides its tensors: every
// reservation, used or not. Measured: what is mapped now (the program, its libraries, OpenBLAS's
// buffers from its start-up, the threads so far). Estimated, from OpenBLAS 0.3 and glibc: a
// second 128 MiB OpenBLAS buffer per compute thread once it runs GEMMs (OpenBLAS holds two per
// thread: the start-up's and the first call's), a 64 MiB malloc arena and an 8 MiB stack per
// thread still to start (the compute threads but the main one, the loader's workers, the
// checkpoint writer), and a 64 MiB margin. Without a finite RLIMIT_AS none of this matters:
// physical memory and cgroups count pages used, which the plan's rows are.
struct AddressSpace {
  double bytes = 0;
  std::string detail;  // how it is made up, for the plan's row
};
// compute_threads: OpenMP's (and OpenBLAS's) thread count; compute_threads() gives this
// process's (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs it may run on).
AddressSpace address_space_outside_tensors(int compute_threads, int loader_workers);
int compute_threads();

// "80GiB", "80 GB", "512MiB", "8e9B", "1.5TB" -> bytes; a number without a unit is refused. Decimal units are powers of 1000
// (kB, MB, GB, TB), binary ones powers of 1024 (KiB, MiB, GiB, TiB; K, M, G, T as Slurm
// and ulimit mean them). Throws fsdp::Error naming `what` for anything else.
double parse_bytes(const std::string& text, const std::string& what);

}  // namespace fsdp::plan
