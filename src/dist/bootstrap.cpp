// Start-up of the distributed runtime: which launcher started this process (the bootstrap
// choice), MPI initialisation, the node layout, and the FSDP process groups
// (communicator.h).
//
// Detection reads only the environment, before any MPI call, so a process started by
// hand (a laptop, CI, `fsdp_train train ...`) gets single-rank communicators and never
// initialises MPI. Order matters: `mpirun` inside a Slurm allocation also sets
// PMIX_RANK and SLURM_JOB_ID, so OpenMPI's own variable is looked at first.
//
//   OMPI_COMM_WORLD_SIZE                -> MPI, "mpirun" (OpenMPI's mpirun / mpiexec)
//   PMIX_RANK or PMI_RANK + SLURM_JOB_ID -> MPI, "srun"  (srun --mpi=pmix / pmi2)
//   PMIX_RANK, PMI_RANK, MV2_COMM_WORLD_SIZE -> MPI, "mpirun" (prterun, MPICH hydra, MVAPICH)
//   RANK / WORLD_SIZE (> 1)             -> the TCP store, "torchrun" (torchrun, or by hand)
//   an srun step of several tasks       -> the TCP store, "srun" (srun without --mpi)
//   none of them                        -> "none": one process, no MPI, no store
// (fsdp/dist/rendezvous.h reads the store's variables; store_bootstrap.cpp starts it.)
//
// Once MPI is up the size the launcher announced is compared with MPI's: a binary linked
// against one MPI but started by another's launcher comes up as N singletons, which
// would otherwise train N unrelated models without a word.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detail.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::dist {
namespace {

struct Launch {
  std::string launcher = "none";
  int announced_size = -1;         // ranks the launcher says it started (-1: not said)
  const char* size_var = nullptr;  // the variable that said it
  std::optional<Rendezvous> store;  // set: the ranks meet through the TCP store, not MPI
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

int env_int(const char* name) {
  const char* v = env(name);
  if (v == nullptr) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  FSDP_CHECK(end != v && *end == '\0' && x > 0 && x < (1L << 30), "environment variable {}={} is not a rank count",
             name, v);
  return int(x);
}

Launch detect_launch() {
  Launch l;
  const bool slurm = env("SLURM_JOB_ID") != nullptr;
  auto announce = [&](const char* var) {
    if (l.size_var == nullptr && env(var) != nullptr) {
      l.announced_size = env_int(var);
      l.size_var = var;
    }
  };
  if (env("OMPI_COMM_WORLD_SIZE") != nullptr) {
    l.launcher = "mpirun";
    announce("OMPI_COMM_WORLD_SIZE");
  } else if (env("PMIX_RANK") != nullptr || env("PMI_RANK") != nullptr || env("MV2_COMM_WORLD_SIZE") != nullptr) {
    const bool srun = slurm && env("MV2_COMM_WORLD_SIZE") == nullptr;
    l.launcher = srun ? "srun" : "mpirun";
    announce("PMI_SIZE");
    announce("MV2_COMM_WORLD_SIZE");
    if (srun) announce("SLURM_STEP_NUM_TASKS");
  } else if (std::optional<Rendezvous> rv = rendezvous_from_env(process_env()); rv && rv->world_size > 1) {
    l.launcher = rv->launcher;
    l.announced_size = rv->world_size;
    l.store = std::move(rv);
  }
  return l;
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

bool g_mpi_ours = false;  // MPI_Init was called here, so MPI_Finalize is ours too

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (g_mpi_ours && initialized && !finalized) {
    detail::stop_watchdog();
    MPI_Finalize();
  }
}

const std::string& host_name_cached() {
  static const std::string h = host_name();
  return h;
}

// MPI up (once per process) with funneled threading: OpenMP threads compute, only the
// main thread talks to MPI.
void ensure_mpi(const Launch& launch) {
  int initialized = 0, finalized = 0;
  FSDP_MPI_CHECK(MPI_Initialized(&initialized), "world", -1, 0);
  FSDP_MPI_CHECK(MPI_Finalized(&finalized), "world", -1, 0);
  FSDP_CHECK(!finalized, "init_process_groups after shutdown_distributed: MPI cannot be initialised twice");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    FSDP_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "world", -1, 0);
    g_mpi_ours = true;
    std::atexit(&finalize_at_exit);
  } else {
    FSDP_MPI_CHECK(MPI_Query_thread(&provided), "world", -1, 0);
  }
  // Errors come back as return codes (thrown with context) instead of killing the job
  // from inside the library; communicators created from the world inherit this.
  FSDP_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "world", -1, 0);
  detail::start_watchdog(MPI_COMM_WORLD);
  int rank = 0, size = 1;
  FSDP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "world", -1, 0);
  FSDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size), "world", -1, 0);
  FSDP_CHECK(provided >= MPI_THREAD_FUNNELED,
             "MPI provides thread level {} but fsdp_train needs MPI_THREAD_FUNNELED ({}) (rank {} on host {})",
             provided, int(MPI_THREAD_FUNNELED), rank, host_name_cached());
  FSDP_CHECK(launch.announced_size < 0 || launch.announced_size == size,
             "the launcher ({}) announced {} ranks ({}={}) but MPI sees {} (rank {} on host {}): the program is "
             "linked against a different MPI than the launcher's, or srun lacks --mpi=pmix",
             launch.launcher, launch.announced_size, launch.size_var, launch.announced_size, size, rank,
             host_name_cached());
}

}  // namespace

ProcessGroups local_process_groups() {
  ProcessGroups g;
  g.world_info.hostname = host_name_cached();
  g.world_info.launcher = "none";
  g.world_info.hosts = {g.world_info.hostname};
  g.world_info.node_of_rank = {0};
  g.world = detail::make_local_communicator("world");
  g.shard = detail::make_local_communicator("shard");
  g.replicate = detail::make_local_communicator("replicate");
  g.tensor = detail::make_local_communicator("tensor");
  g.expert = detail::make_local_communicator("expert");
  g.expert_shard = detail::make_local_communicator("expert shard");
  return g;
}

ProcessGroups init_process_groups(const MeshSpec& spec) { return split_process_groups(init_world_groups(), spec); }

ProcessGroups init_process_groups(int shard_group_size) { return init_process_groups(MeshSpec{1, shard_group_size}); }

ProcessGroups init_world_groups() {
  const Launch launch = detect_launch();
  if (launch.launcher == "none") {
    ProcessGroups g = local_process_groups();
    g.shard = g.replicate = g.tensor = g.expert = g.expert_shard = nullptr;
    return g;
  }
  if (launch.store) return detail::init_store_world_groups(*launch.store);

  ensure_mpi(launch);
  MPI_Comm world = MPI_COMM_NULL;
  FSDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world), "world", -1, 0);
  ProcessGroups base;
  base.world = detail::make_mpi_communicator(world, "world");  // owns `world` from here on
  WorldInfo& w = base.world_info;
  w.rank = base.world->rank();
  w.size = base.world->size();
  w.hostname = host_name_cached();
  w.launcher = launch.launcher;
  w.bootstrap = "MPI";
  w.hosts = detail::world_hosts();

  // Node layout: MPI's shared-memory split is the node. Its rank 0 (key = world rank) is
  // the node's lowest world rank, its leader; nodes are numbered in leader order. Exact
  // (no hostname hashing), and the same grouping MPI uses for shared memory.
  MPI_Comm node = MPI_COMM_NULL;
  FSDP_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node), "world", w.rank,
                 w.size);
  FSDP_MPI_CHECK(MPI_Comm_rank(node, &w.local_rank), "node", -1, 0);
  FSDP_MPI_CHECK(MPI_Comm_size(node, &w.local_size), "node", -1, 0);
  int leader = w.rank;
  FSDP_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, node), "node", w.local_rank, w.local_size);
  FSDP_MPI_CHECK(MPI_Comm_free(&node), "node", w.local_rank, w.local_size);
  const int is_leader = w.local_rank == 0 ? 1 : 0;
  std::vector<int> leaders(size_t(w.size), 0);
  FSDP_MPI_CHECK(MPI_Allgather(&is_leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world), "world", w.rank, w.size);
  w.num_nodes = w.node_index = 0;
  for (int r = 0; r < w.size; ++r) {
    w.num_nodes += leaders[size_t(r)];
    if (r < leader) w.node_index += leaders[size_t(r)];
  }
  // Every rank's node: what the device mesh orders ranks by (mesh.h).
  w.node_of_rank.assign(size_t(w.size), 0);
  FSDP_MPI_CHECK(MPI_Allgather(&w.node_index, 1, MPI_INT, w.node_of_rank.data(), 1, MPI_INT, world), "world", w.rank,
                 w.size);
  return base;  // the mesh and its groups come with split_process_groups
}

ProcessGroups split_process_groups(const ProcessGroups& base, int shard_group_size) {
  return split_process_groups(base, MeshSpec{1, shard_group_size});
}

ProcessGroups split_process_groups(const ProcessGroups& base, const MeshSpec& spec) {
  FSDP_CHECK(base.world != nullptr, "split_process_groups: the base groups have no world communicator");
  const WorldInfo& w = base.world_info;
  if (detail::store_client_of(*base.world) != nullptr) return detail::split_store_process_groups(base, spec);
  const MPI_Comm world = detail::mpi_comm_of(*base.world);
  if (world == MPI_COMM_NULL) {  // a single-rank world: every group is this rank
    FSDP_CHECK(base.world->size() == 1, "split_process_groups: world '{}' of {} ranks is not an MPI communicator",
               base.world->name(), base.world->size());
    resolve_mesh_shape(spec, 1, {0}, 0);
    ProcessGroups g = local_process_groups();
    g.world_info = w;
    g.world = base.world;
    return g;
  }
  // The inputs are the same on every rank (node_of_rank was all-gathered), so every rank
  // accepts or throws alike.
  const MeshShape shape = resolve_mesh_shape(spec, w.size, w.node_of_rank, w.rank);
  ProcessGroups g;
  g.world_info = w;
  g.world = base.world;
  g.mesh = DeviceMesh(shape, w.node_of_rank);
  // One MPI_Comm_split per group kind: color = which group of that kind, key = the place
  // in it (mesh.h), so group ranks follow the mesh. Without tensor parallelism, shard
  // groups are consecutive ranks (or a node's ranks) and replicate groups the ranks at the
  // same place of their shard groups, as before the mesh.
  auto split = [&](std::initializer_list<MeshDim> dims, const char* name) {
    MPI_Comm comm = MPI_COMM_NULL;
    FSDP_MPI_CHECK(MPI_Comm_split(world, g.mesh.group_color(w.rank, dims), g.mesh.group_rank(w.rank, dims), &comm),
                   "world", w.rank, w.size);
    return std::shared_ptr<Communicator>(detail::make_mpi_communicator(comm, name));
  };
  g.shard = split({MeshDim::Shard, MeshDim::Expert}, "shard");
  g.replicate = split({MeshDim::Replicate}, "replicate");
  g.tensor = split({MeshDim::Tensor}, "tensor");
  g.expert = split({MeshDim::Expert}, "expert");
  g.expert_shard = split({MeshDim::Shard}, "expert shard");
  return g;
}

void shutdown_distributed() {
  if (detail::store_world_up()) {
    detail::shutdown_store_world();
    return;
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (g_mpi_ours && initialized && !finalized) {
    detail::stop_watchdog();
    FSDP_MPI_CHECK(MPI_Finalize(), "world", -1, 0);
  }
}

void abort_all(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (detail::store_world_up()) detail::abort_store_world(exit_code);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace fsdp::dist
