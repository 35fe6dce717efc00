// How much memory a CPU training process may use, and byte sizes as people write them.
#pragma once

#include <string>

namespace fsdp::plan {

struct HostMemory {
  double bytes = 0;
  std::string source;  // which limit it is: "physical memory", "cgroup memory.max", "RLIMIT_AS", ...
  bool node_wide = false;  // the node's (physical, cgroup: shared by its ranks), not the process's own
};

// The smallest of: physical memory (/proc/meminfo MemTotal), the cgroup's limit (v2
// memory.max, v1 memory.limit_in_bytes, of this process's cgroup and its ancestors), and
// the process limits RLIMIT_AS (`ulimit -v`) and RLIMIT_DATA. The first two are the node's,
// shared by every rank on it; the rlimits are each process's own (divide_among says how
// many ranks share the node's).
HostMemory host_memory_limit(int divide_among = 1);

// "80GiB", "80 GB", "512MiB", "8e9B", "1.5TB" -> bytes; a number without a unit is refused. Decimal units are powers of 1000
// (kB, MB, GB, TB), binary ones powers of 1024 (KiB, MiB, GiB, TiB; K, M, G, T as Slurm
// and ulimit mean them). Throws fsdp::Error naming `what` for anything else.
double parse_bytes(const std::string& text, const std::string& what);

}  // namespace fsdp::plan
