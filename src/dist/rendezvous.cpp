// The rank layout of a launch without MPI, from the environment; see rendezvous.h.
#include "fsdp/dist/rendezvous.h"

#include <cstdlib>

#include "fsdp/core/error.h"

namespace fsdp::dist {
namespace {

const char* get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// A whole decimal number in [lo, hi], or throws naming the variable.
long number(const EnvLookup& env, const char* name, long lo, long hi) {
  const char* v = get(env, name);
  FSDP_CHECK(v != nullptr, "environment variable {} is not set", name);
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  FSDP_CHECK(end != v && *end == '\0' && x >= lo && x <= hi, "environment variable {}={} is not a number in [{}, {}]",
             name, v, lo, hi);
  return x;
}

constexpr long kMaxRanks = 1L << 20;

}  // namespace

EnvLookup process_env() {
  return [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to the first ',' outside brackets.
  std::string out;
  int depth = 0;
  bool in_range = false;  // inside brackets, past the first element
  for (char c : nodelist) {
    if (c == '[') {
      ++depth;
      in_range = false;
      continue;
    }
    if (c == ']') {
      --depth;
      in_range = false;
      continue;
    }
    if (depth > 0) {
      if (c == ',' || c == '-') in_range = true;  // "03-05": keep "03"; "03,09": keep "03"
      if (!in_range) out += c;
      continue;
    }
    if (c == ',') break;
    out += c;
  }
  return out;
}

std::optional<Rendezvous> rendezvous_from_env(const EnvLookup& env) {
  Rendezvous r;
  if (get(env, "RANK") != nullptr || get(env, "WORLD_SIZE") != nullptr) {
    r.launcher = "torchrun";
    r.world_size = int(number(env, "WORLD_SIZE", 1, kMaxRanks));
    r.rank = int(number(env, "RANK", 0, kMaxRanks));
    FSDP_CHECK(r.rank < r.world_size, "environment variable RANK={} is not below WORLD_SIZE={}", r.rank,
               r.world_size);
    if (get(env, "LOCAL_RANK") != nullptr) {
      r.local_rank = int(number(env, "LOCAL_RANK", 0, kMaxRanks));
      r.local_rank_var = "LOCAL_RANK";
    }
    if (r.world_size == 1) return r;
    const char* addr = get(env, "MASTER_ADDR");
    FSDP_CHECK(addr != nullptr,
               "RANK={} and WORLD_SIZE={} are set but MASTER_ADDR is not: set it to the host of rank 0 (torchrun sets "
               "it), and MASTER_PORT to a free port there",
               r.rank, r.world_size);
    r.master_addr = addr;
    FSDP_CHECK(get(env, "MASTER_PORT") != nullptr,
               "RANK={} and WORLD_SIZE={} are set but MASTER_PORT is not: set it to a free port on MASTER_ADDR {}",
               r.rank, r.world_size, r.master_addr);
    r.master_port = int(number(env, "MASTER_PORT", 1, 65535));
    r.port_source = "MASTER_PORT";
    const char* run = get(env, "TORCHELASTIC_RUN_ID");
    r.job = fmt::format("torchrun {} {}:{}", run != nullptr ? run : "-", r.master_addr, r.master_port);
    return r;
  }
  const char* job = get(env, "SLURM_JOB_ID");
  if (job == nullptr) return std::nullopt;
  // Inside an srun step: the step's task count (SLURM_NTASKS is the allocation's, and alone, in
  // a batch script or an salloc shell, it describes no launch of this process).
  const char* tasks_var = get(env, "SLURM_STEP_NUM_TASKS") != nullptr                              ? "SLURM_STEP_NUM_TASKS"
                          : get(env, "SLURM_STEP_ID") != nullptr && get(env, "SLURM_NTASKS") != nullptr ? "SLURM_NTASKS"
                                                                                                     : nullptr;
  if (tasks_var == nullptr) return std::nullopt;
  r.launcher = "srun";
  r.world_size = int(number(env, tasks_var, 1, kMaxRanks));
  if (r.world_size == 1) return std::nullopt;
  r.rank = int(number(env, "SLURM_PROCID", 0, kMaxRanks));
  FSDP_CHECK(r.rank < r.world_size, "environment variable SLURM_PROCID={} is not below {}={}", r.rank, tasks_var,
             r.world_size);
  if (get(env, "SLURM_LOCALID") != nullptr) {
    r.local_rank = int(number(env, "SLURM_LOCALID", 0, kMaxRanks));
    r.local_rank_var = "SLURM_LOCALID";
  }
  if (const char* addr = get(env, "MASTER_ADDR")) {
    r.master_addr = addr;
  } else {
    const char* list_var = get(env, "SLURM_STEP_NODELIST") != nullptr ? "SLURM_STEP_NODELIST"
                           : get(env, "SLURM_JOB_NODELIST") != nullptr ? "SLURM_JOB_NODELIST"
                                                                        : "SLURM_NODELIST";
    const char* list = get(env, list_var);
    FSDP_CHECK(list != nullptr, "srun started {} tasks but none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or "
               "MASTER_ADDR says where rank 0 runs", r.world_size);
    r.master_addr = first_slurm_host(list);
    FSDP_CHECK(!r.master_addr.empty(), "{}='{}' names no host", list_var, list);
  }
  const char* step = get(env, "SLURM_STEP_ID") != nullptr ? get(env, "SLURM_STEP_ID") : "0";
  if (get(env, "MASTER_PORT") != nullptr) {
    r.master_port = int(number(env, "MASTER_PORT", 1, 65535));
    r.port_source = "MASTER_PORT";
  } else {
    // Spread over 20000-59999 by job and step, so that jobs sharing rank 0's node (and the
    // steps of one job) do not ask for one port.
    const long job_id = std::strtol(job, nullptr, 10), step_id = std::strtol(step, nullptr, 10);
    r.master_port = int(20000 + (job_id * 7 + step_id % 7) % 40000);
    r.port_source = fmt::format("derived from SLURM_JOB_ID {} and SLURM_STEP_ID {} (set MASTER_PORT to choose)", job,
                                step);
  }
  r.job = fmt::format("slurm {}.{}", job, step);
  return r;
}

}  // namespace fsdp::dist
