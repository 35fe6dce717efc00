// Start-up checks of the launch itself, run on every rank before any work: the process
// groups a strategy needs, that every rank was given the same effective config, and that
// the launch environment agrees with what MPI reports:
//   - Slurm's task count and the MPI world size (mpirun inside an allocation with another
//     -np; srun without --mpi=pmix starting N single-rank copies)          -> error
//   - more ranks on a node than GPUs it can see, when GPUs are asked for   -> error
//   - a multi-node job whose checkpoint.dir is not one directory on every node: rank 0
//     writes a file there and each node looks for it; a node that does not see it on a
//     node-local filesystem type                                           -> error
//     (on a shared type, maybe its attribute cache: a warning), and without the probe
//     (the file could not be written) a node-local filesystem type         -> warning
// The environment checks are a pure function of a LaunchEnv, so tests inject one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::train {

// The shard-group size to ask init_process_groups for: the whole world for FULL_SHARD and
// SHARD_GRAD_OP, one rank for NO_SHARD, fsdp.shard_group_size (default: one node) for
// HYBRID_SHARD and HYBRID_SHARD_ZERO2.
int shard_group_size(const config::Config& cfg);
// The device mesh the config asks for: parallel.tensor, that shard-group size and
// parallel.expert.
dist::MeshSpec mesh_spec(const config::Config& cfg);
// A layout the launched world cannot hold (dist::mesh_problem: parallel.tensor not dividing
// the world size or a node's ranks, a shard group size not dividing the data-parallel
// ranks) as a config error naming the key (exit 2), the same on every rank.
void check_mesh(const config::Config& cfg, const dist::WorldInfo& world);

// Runs check_launch_env on read_launch_env() (errors throw fsdp::Error, warnings are
// logged; see LaunchFinding for which rank speaks), then throws naming the ranks whose
// effective config differs from rank 0's (by config_hash, one all-gather over the world).
void check_launch(const config::Config& cfg, dist::ProcessGroups& groups);

// What the environment checks look at.
struct LaunchEnv {
  std::map<std::string, std::string> vars;  // environment variables that are set
  bool cuda_build = false;                  // this binary has the CUDA backend
  int cuda_devices = -1;                    // devices the CUDA runtime sees; -1 = not asked
  // statfs f_type of the filesystem holding `path` (or its nearest existing ancestor);
  // nullopt when it cannot be read.
  std::function<std::optional<int64_t>(const std::string& path)> fs_type;
  // Multi-node jobs: the hosts that did not see the file rank 0 wrote next to
  // checkpoint.dir (empty: every node saw it, the directory is shared whatever its type);
  // nullopt: not probed.
  std::optional<std::vector<std::string>> checkpoint_dir_unseen_by;
};

// The real environment: the variables the checks use, the build, statfs. The CUDA runtime
// is asked for its device count only when Slurm gave the job GPUs (it costs a CUDA init).
LaunchEnv read_launch_env();

struct LaunchFinding {
  enum class Severity { Warning, Error };
  // Job: the same on every rank; reported by world rank 0. Node: may differ between nodes;
  // reported by each node's local rank 0. The other ranks stay silent (and, on an error,
  // are taken down by the reporter's abort) so a 256-rank job prints one message, not 256.
  enum class Scope { Job, Node };
  Severity severity;
  Scope scope;
  std::string message;
};

// Every problem the launch environment shows, in check order; empty when all is well.
std::vector<LaunchFinding> check_launch_env(const config::Config& cfg, const dist::WorldInfo& world,
                                            const LaunchEnv& env);

// A filesystem by its statfs f_type: a name ("ext4", "lustre", ...) and whether nodes share
// it. Unknown types (FUSE, 9p, anything new) are neither: nothing is said about them.
struct Filesystem {
  enum class Kind { Local, Shared, Unknown };
  std::string name;
  Kind kind = Kind::Unknown;
};
Filesystem classify_filesystem(int64_t f_type);

}  // namespace fsdp::train
