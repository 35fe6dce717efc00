// The start-up checks of the launch (process groups, the same config everywhere, Slurm and
// MPI agreeing, GPUs per node); see launch_checks.h.
#include "fsdp/train/launch_checks.h"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/config/model_options.h"
#include "fsdp/core/error.h"

#ifdef FSDP_WITH_CUDA
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {
namespace {

using Severity = LaunchFinding::Severity;
using Scope = LaunchFinding::Scope;

const std::string* var(const LaunchEnv& env, const char* name) {
  const auto it = env.vars.find(name);
  return it == env.vars.end() || it->second.empty() ? nullptr : &it->second;
}

// A non-negative count, or nullopt when unset or not a plain number ("4(x2)" is not).
std::optional<int> count_var(const LaunchEnv& env, const char* name) {
  const std::string* v = var(env, name);
  if (v == nullptr || v->size() > 9 || v->find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(*v);
}

// Slurm's view of the task count against MPI's. Inside an srun step (SLURM_STEP_ID set) the
// step's own count is the truth for ranks srun started; ranks that mpirun started inside a
// step are the children of mpirun's per-node daemons, whose step counts daemons, so they are
// not judged. Outside a step (batch script, salloc shell) SLURM_NTASKS is the allocation's.
void check_task_count(const dist::WorldInfo& w, const LaunchEnv& env, std::vector<LaunchFinding>& out) {
  const std::string* job = var(env, "SLURM_JOB_ID");
  if (job == nullptr) return;
  // torchrun starts its workers itself (one srun task per node, or none): Slurm's task count
  // does not count them, and the TCP store has already held them to WORLD_SIZE.
  if (w.launcher == "torchrun") return;
  if (var(env, "SLURM_STEP_ID") != nullptr) {
    if (w.launcher == "mpirun") return;
    std::optional<int> n = count_var(env, "SLURM_STEP_NUM_TASKS");
    const char* name = "SLURM_STEP_NUM_TASKS";
    if (!n) {
      n = count_var(env, "SLURM_NTASKS");
      name = "SLURM_NTASKS";
    }
    if (!n || *n == w.size) return;
    if (w.size == 1) {
      out.push_back({Severity::Error, Scope::Job,
                     fmt::format("srun started {} tasks ({}={}) but each runs alone (MPI world size 1): they would train "
                                 "{} unrelated models; launch with `srun --mpi=pmix` (Slurm job {}, host {})",
                                 *n, name, *n, *n, *job, w.hostname)});
    } else {
      out.push_back({Severity::Error, Scope::Job,
                     fmt::format("srun started {} tasks ({}={}) but MPI sees {} ranks: the program and srun disagree on "
                                 "the MPI in use; launch with `srun --mpi=pmix` (Slurm job {}, host {})",
                                 *n, name, *n, w.size, *job, w.hostname)});
    }
    return;
  }
  const std::optional<int> n = count_var(env, "SLURM_NTASKS");
  if (!n || *n == w.size) return;
  if (w.launcher == "none") {
    if (*n > 1) {
      out.push_back({Severity::Warning, Scope::Job,
                     fmt::format("Slurm job {} has {} tasks (SLURM_NTASKS) but fsdp_train runs as one process without "
                                 "srun or mpirun, so the other tasks' CPUs and GPUs sit idle; launch with `srun "
                                 "--mpi=pmix` for one rank per task",
                                 *job, *n)});
    }
    return;
  }
  out.push_back({Severity::Error, Scope::Job,
                 fmt::format("{} started {} ranks but Slurm job {} has {} tasks (SLURM_NTASKS={}): launch with `srun "
                             "--mpi=pmix` (one rank per task), or `mpirun -np {}`, or ask Slurm for {} tasks",
                             w.launcher, w.size, *job, *n, *n, *n, w.size)});
}

// CUDA_VISIBLE_DEVICES counts as the runtime does: entries up to the first invalid one
// ("-1" hides everything after it; "" and NoDevFiles, Slurm's "none", hide all).
int visible_from_env(const std::string& v) {
  if (v == "NoDevFiles") return 0;
  int n = 0;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find(',', start), v.size());
    const std::string item = v.substr(start, end - start);
    if (item.empty() || item[0] == '-') break;
    ++n;
    start = end + 1;
  }
  return n;
}

// GPUs are "asked for" when Slurm allocated them to the job or step (GRES). Then every
// rank on a node needs one: ranks see all of the node's GPUs and take local_rank's, or
// Slurm binds one to each task (--gpus-per-task) and each rank sees exactly one.
void check_gpus(const dist::WorldInfo& w, const LaunchEnv& env, std::vector<LaunchFinding>& out) {
  std::string asked;
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"}) {
    const std::string* v = var(env, name);
    if (v != nullptr && *v != "0") {
      asked = fmt::format("{}={}", name, *v);
      break;
    }
  }
  if (asked.empty()) return;
  if (!env.cuda_build) {
    out.push_back({Severity::Error, Scope::Node,
                   fmt::format("Slurm gave this job GPUs ({}) but this fsdp_train was built without the CUDA backend, "
                               "so its {} rank(s) on {} see no GPU; rebuild where nvcc is found (FSDP_CUDA=ON), or "
                               "run on CPU nodes without --gpus (GPUS_PER_NODE=0)",
                               asked, w.local_size, w.hostname)});
    return;
  }
  int visible = env.cuda_devices >= 0 ? env.cuda_devices : 0;
  std::string seen = fmt::format("CUDA device count {}", visible);
  if (const auto cvd = env.vars.find("CUDA_VISIBLE_DEVICES"); cvd != env.vars.end()) {
    const int from_env = visible_from_env(cvd->second);
    if (env.cuda_devices < 0 || from_env < visible) {
      visible = from_env;
      seen = fmt::format("CUDA_VISIBLE_DEVICES='{}'", cvd->second);
    }
  }
  const bool bound_per_task = visible == 1 && var(env, "SLURM_GPUS_PER_TASK") != nullptr;
  if (visible >= w.local_size || bound_per_task) return;
  out.push_back({Severity::Error, Scope::Node,
                 fmt::format("{} ranks on {} but {} GPU(s) visible ({}): one rank per GPU; launch {} task(s) per node "
                             "(GPUS_PER_NODE={}, srun --ntasks-per-node={})",
                             w.local_size, w.hostname, visible, seen, visible, visible, visible)});
}

// Each rank writes its own shards into checkpoint.dir and resume reads them all back, on
// any node: in a multi-node job a node-local directory splits one checkpoint over disks
// that no single node can read (with HYBRID_SHARD only one node's ranks write, so saves
// even succeed, and every resume then finds nothing it can verify).
void check_checkpoint_fs(const config::Config& cfg, const dist::WorldInfo& w, const LaunchEnv& env,
                         std::vector<LaunchFinding>& out) {
  if (w.num_nodes <= 1) return;
  const std::string dir = config::checkpoint_dir(cfg);
  const std::optional<int64_t> type = env.fs_type ? env.fs_type(dir) : std::nullopt;
  const Filesystem fs = type ? classify_filesystem(*type) : Filesystem{"type unknown", Filesystem::Kind::Unknown};
  if (env.checkpoint_dir_unseen_by) {
    const std::vector<std::string>& unseen = *env.checkpoint_dir_unseen_by;
    if (unseen.empty()) return;  // one directory on every node, whatever its type
    const bool local = fs.kind == Filesystem::Kind::Local;
    out.push_back({local ? Severity::Error : Severity::Warning, Scope::Job,
                   fmt::format("checkpoint.dir {} is not shared by the job's {} nodes: {} {} not see the file rank 0 "
                               "wrote there ({} on {}){}; each node would keep only its own ranks' shards and no node "
                               "could resume from them: put checkpoint.dir (or run.dir) on a filesystem every node "
                               "mounts (NFS, Lustre, GPFS, BeeGFS, WekaFS, ...)",
                               dir, w.num_nodes, fmt::join(unseen, ", "), unseen.size() == 1 ? "does" : "do", fs.name,
                               w.hostname, local ? "" : " (or its cache has not caught up)")});
    return;
  }
  if (fs.kind != Filesystem::Kind::Local) return;
  out.push_back({Severity::Warning, Scope::Node,
                 fmt::format("checkpoint.dir {} is on a node-local filesystem ({}) on {}, but this job spans {} nodes: "
                             "each node would hold only its own ranks' shards and no node could resume from them; put "
                             "checkpoint.dir (or run.dir) on a filesystem every node mounts (NFS, Lustre, GPFS, "
                             "BeeGFS, WekaFS, ...)",
                             dir, fs.name, w.hostname, w.num_nodes)});
}

std::optional<int64_t> statfs_type(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path.empty() ? "." : path);
  while (true) {
    struct statfs s {};
    if (::statfs(p.c_str(), &s) == 0) return int64_t(s.f_type);
    if (errno != ENOENT && errno != ENOTDIR) return std::nullopt;
    if (!p.has_relative_path()) return std::nullopt;
    p = p.parent_path();
  }
}

// checkpoint.dir, or its nearest existing ancestor (it may not exist yet; the ancestor is
// on the filesystem it will be created on).
std::filesystem::path existing_dir_of(const std::string& path) {
  std::filesystem::path p = std::filesystem::absolute(path.empty() ? "." : path);
  std::error_code ec;
  while (!std::filesystem::is_directory(p, ec) && p.has_relative_path()) p = p.parent_path();
  return p;
}

// Collective over the world (multi-node jobs): rank 0 creates a file with a random name next
// to checkpoint.dir, every node's local rank 0 looks for it at the same path, rank 0 removes
// it. Returns the hosts that did not see it, or nullopt when rank 0 could not write it.
// The path travels from rank 0: "the nearest existing directory" of a fresh run's
// checkpoint.dir is run.dir once rank 0's log file has made it, and a node that asked
// earlier would look one level up and report the directory unshared (seen in slurm_two_nodes).
std::optional<std::vector<std::string>> probe_checkpoint_dir(const config::Config& cfg, dist::ProcessGroups& groups) {
  dist::Communicator& world = *groups.world;
  const dist::WorldInfo& w = groups.world_info;
  // {written, path length, path bytes}; the bytes travel as doubles' bit patterns
  // (broadcast copies bytes).
  constexpr size_t kPathDoubles = 512;
  Tensor head = Tensor::zeros({int64_t(2 + kPathDoubles)}, DType::F64);
  if (w.rank == 0) {
    const uint64_t token = (uint64_t(std::random_device{}()) << 32) ^ uint64_t(::getpid()) ^
                           uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string path =
        (existing_dir_of(config::checkpoint_dir(cfg)) / fmt::format(".fsdp_train_probe_{:016x}", token)).string();
    int fd = -1;
    if (path.size() < kPathDoubles * 8) fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      std::memcpy(head.data<double>() + 2, path.data(), path.size());
    }
    head.data<double>()[0] = fd >= 0 ? 1 : 0;
    head.data<double>()[1] = double(path.size());
  }
  world.wait(world.broadcast(head, 0));
  if (head.data<double>()[0] == 0) return std::nullopt;
  const std::string probe(reinterpret_cast<const char*>(head.data<double>() + 2), size_t(head.data<double>()[1]));
  Tensor seen = Tensor::zeros({1}, DType::F64), all = Tensor::zeros({world.size()}, DType::F64);
  std::error_code ec;
  seen.data<double>()[0] = w.local_rank != 0 || std::filesystem::exists(probe, ec) ? 1 : 0;
  world.wait(world.all_gather(seen, all));
  if (w.rank == 0) std::filesystem::remove(probe, ec);
  std::vector<std::string> unseen;
  for (int r = 0; r < world.size(); ++r) {
    if (all.data<double>()[r] == 0) unseen.push_back(r < int(w.hosts.size()) ? w.hosts[size_t(r)] : "?");
  }
  return unseen;
}

}  // namespace

int shard_group_size(const config::Config& cfg) {
  switch (cfg.fsdp.sharding_strategy) {
    case config::ShardingStrategy::FULL_SHARD:
    case config::ShardingStrategy::SHARD_GRAD_OP: return 0;
    case config::ShardingStrategy::NO_SHARD: return 1;
    case config::ShardingStrategy::HYBRID_SHARD:
    case config::ShardingStrategy::HYBRID_SHARD_ZERO2: return cfg.fsdp.shard_group_size > 0 ? cfg.fsdp.shard_group_size : -1;
  }
  return 0;
}

dist::MeshSpec mesh_spec(const config::Config& cfg) {
  return dist::MeshSpec{cfg.parallel.tensor, shard_group_size(cfg), cfg.parallel.expert};
}

void check_mesh(const config::Config& cfg, const dist::WorldInfo& world) {
  std::vector<int> nodes = world.node_of_rank;
  if (nodes.empty()) nodes.assign(size_t(world.size), 0);
  const std::optional<dist::MeshProblem> p = dist::mesh_problem(mesh_spec(cfg), world.size, nodes);
  // The tensor degree against the world and its nodes first (the mesh knows every node's
  // ranks), then the shard group in the words `plan` uses, then what is left (unequal nodes).
  if (p && p->key == "parallel.tensor") config::fail_key(cfg, p->key, p->text());
  std::vector<int> per_node;
  for (int n : nodes) {
    if (n >= int(per_node.size())) per_node.resize(size_t(n) + 1, 0);
    ++per_node[size_t(n)];
  }
  config::checked_shard_group(cfg, world.size, *std::min_element(per_node.begin(), per_node.end()));
  if (p) config::fail_key(cfg, p->key, p->text());
}

Filesystem classify_filesystem(int64_t f_type) {
  struct Known {
    uint32_t magic;
    const char* name;
    Filesystem::Kind kind;
  };
  using K = Filesystem::Kind;
  // Magic numbers from linux/magic.h and the vendors' client modules.
  static constexpr Known kKnown[] = {
      {0xEF53, "ext4", K::Local},          {0x58465342, "xfs", K::Local},       {0x9123683E, "btrfs", K::Local},
      {0x01021994, "tmpfs", K::Local},     {0x858458F6, "ramfs", K::Local},     {0x794C7630, "overlayfs", K::Local},
      {0x2FC12FC1, "zfs", K::Local},       {0xF2F52010, "f2fs", K::Local},      {0x52654973, "reiserfs", K::Local},
      {0x3153464A, "jfs", K::Local},       {0x73717368, "squashfs", K::Local},  {0x6969, "nfs", K::Shared},
      {0x0BD00BD0, "lustre", K::Shared},   {0x47504653, "gpfs", K::Shared},     {0x19830326, "beegfs", K::Shared},
      {0x18031977, "wekafs", K::Shared},   {0x00C36400, "cephfs", K::Shared},   {0xFF534D42, "cifs", K::Shared},
      {0xFE534D42, "smb2", K::Shared},     {0x01161970, "gfs2", K::Shared},     {0x7461636F, "ocfs2", K::Shared},
      {0xAAD7AAEA, "panfs", K::Shared},    {0x5346414F, "afs", K::Shared},      {0x65735546, "fuse", K::Unknown},
      {0x01021997, "9p", K::Unknown},
  };
  // f_type is a signed long on some ABIs: compare the low 32 bits.
  const uint32_t magic = uint32_t(uint64_t(f_type) & 0xFFFFFFFFu);
  for (const Known& k : kKnown) {
    if (k.magic == magic) return Filesystem{k.name, k.kind};
  }
  return Filesystem{fmt::format("f_type 0x{:x}", magic), K::Unknown};
}

LaunchEnv read_launch_env() {
  LaunchEnv env;
  for (const char* name : {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_GPUS",
                           "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_TASK", "CUDA_VISIBLE_DEVICES"}) {
    if (const char* v = std::getenv(name)) env.vars[name] = v;
  }
#ifdef FSDP_WITH_CUDA
  env.cuda_build = true;
  const bool asked = env.vars.count("SLURM_STEP_GPUS") || env.vars.count("SLURM_JOB_GPUS") ||
                     env.vars.count("SLURM_GPUS_ON_NODE");
  if (asked) env.cuda_devices = cuda::device_count();
#endif
  env.fs_type = statfs_type;
  return env;
}

std::vector<LaunchFinding> check_launch_env(const config::Config& cfg, const dist::WorldInfo& world,
                                            const LaunchEnv& env) {
  std::vector<LaunchFinding> out;
  check_task_count(world, env, out);
  check_gpus(world, env, out);
  check_checkpoint_fs(cfg, world, env, out);
  return out;
}

void check_launch(const config::Config& cfg, dist::ProcessGroups& groups) {
  const dist::WorldInfo& info = groups.world_info;
  LaunchEnv env = read_launch_env();
  if (info.num_nodes > 1) env.checkpoint_dir_unseen_by = probe_checkpoint_dir(cfg, groups);
  for (const LaunchFinding& f : check_launch_env(cfg, info, env)) {
    const bool reporter = f.scope == LaunchFinding::Scope::Job ? info.rank == 0 : info.local_rank == 0;
    if (!reporter) continue;
    if (f.severity == LaunchFinding::Severity::Error) throw Error(f.message);
    spdlog::warn("{}", f.message);
  }

  dist::Communicator& world = *groups.world;
  const int n = world.size();
  if (n == 1) return;
  // The 64-bit hash travels as the bit pattern of a double: all-gather copies bytes and
  // does no arithmetic, so every bit arrives intact.
  const uint64_t mine = config::config_hash(cfg);
  Tensor shard = Tensor::empty({1}, DType::F64);
  Tensor all = Tensor::empty({n}, DType::F64);
  std::memcpy(shard.data_ptr(), &mine, 8);
  world.wait(world.all_gather(shard, all));
  uint64_t root = 0;
  std::memcpy(&root, all.data<double>(), 8);
  std::string differ;
  for (int r = 1; r < n; ++r) {
    uint64_t h = 0;
    std::memcpy(&h, all.data<double>() + r, 8);
    if (h != root) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  FSDP_CHECK(differ.empty(),
             "ranks disagree on the effective config: rank(s) {} differ from rank 0 (same --config file and --set "
             "overrides on every rank? this is rank {} on {})",
             differ, world.rank(), groups.world_info.hostname);
}

}  // namespace fsdp::train
