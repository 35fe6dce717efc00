// Where the ranks of a launch without MPI meet: their rank, the world size and the address of
// the TCP store (fsdp/dist/tcp_store.h), read from the launcher's environment variables only.
//
//   torchrun-style   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun sets them
//                    for each worker; a script may set them by hand)
//   srun             SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID; the
//                    store on the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST),
//                    MASTER_ADDR overriding it; the port MASTER_PORT, else derived from the job
//                    and step ids so that two jobs sharing a node do not collide
//
// torchrun's variables win when both are set (torchrun inside an srun step).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace fsdp::dist {

struct Rendezvous {
  std::string launcher;     // "torchrun" or "srun"
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;      // LOCAL_RANK / SLURM_LOCALID when set (checked against the hosts)
  std::string local_rank_var;
  std::string master_addr;  // where rank 0 hosts the store
  int master_port = 0;
  std::string port_source;  // "MASTER_PORT", or how it was derived
  std::string job;          // the store's job key (a rank of another job is refused)
};

// An environment variable's value, or nullptr (tests pass a map).
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

// The torchrun-style or Slurm layout the variables describe, or nullopt when they describe
// none (RANK/WORLD_SIZE unset and not inside a multi-task srun step). Throws fsdp::Error
// naming the variable when they are inconsistent (RANK outside WORLD_SIZE, no MASTER_ADDR, a
// value that is not a number).
std::optional<Rendezvous> rendezvous_from_env(const EnvLookup& env);

// The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03", "a-[1-2]x[7,9]" -> "a-1x7".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace fsdp::dist
