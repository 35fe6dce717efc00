// The launch-environment checks (launch_checks.h) on injected environments: what Slurm,
// mpirun and srun set in each way of starting (measured on a real Slurm 22.05, see
// ../shared/notes/local-slurm.md), and what must come of each.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "fsdp/config/config.h"
#include "fsdp/train/launch_checks.h"

namespace fsdp::train {
namespace {

using Severity = LaunchFinding::Severity;
using Scope = LaunchFinding::Scope;

dist::WorldInfo world(const std::string& launcher, int size, int local_size = -1, int num_nodes = 1) {
  dist::WorldInfo w;
  w.size = size;
  w.local_size = local_size < 0 ? size : local_size;
  w.num_nodes = num_nodes;
  w.hostname = "node7";
  w.launcher = launcher;
  return w;
}

LaunchEnv env_of(std::map<std::string, std::string> vars) {
  LaunchEnv e;
  e.vars = std::move(vars);
  return e;
}

std::vector<LaunchFinding> run(const dist::WorldInfo& w, const LaunchEnv& e, const config::Config& cfg = {}) {
  return check_launch_env(cfg, w, e);
}

// The one finding, checked for severity, scope and the words a user needs.
void expect_one(const std::vector<LaunchFinding>& got, Severity severity, Scope scope,
                std::initializer_list<std::string> words) {
  ASSERT_EQ(got.size(), 1u) << (got.empty() ? "no finding" : got[0].message + " ...");
  EXPECT_EQ(got[0].severity, severity) << got[0].message;
  EXPECT_EQ(got[0].scope, scope) << got[0].message;
  for (const std::string& w : words) EXPECT_NE(got[0].message.find(w), std::string::npos) << w << " not in: " << got[0].message;
}

// ---- Task counts ---------------------------------------------------------------------------

TEST(LaunchChecks, NothingOutsideSlurm) {
  EXPECT_TRUE(run(world("none", 1), env_of({})).empty());
  EXPECT_TRUE(run(world("mpirun", 4), env_of({{"SLURM_NTASKS", "2"}})).empty());  // no SLURM_JOB_ID: stale
}

TEST(LaunchChecks, SrunStepThatMatches) {
  const auto e = env_of({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"},
                         {"SLURM_STEP_NUM_TASKS", "4"}});
  EXPECT_TRUE(run(world("srun", 4), e).empty());
}

TEST(LaunchChecks, SrunStepOfAnotherSizeThanMpi) {
  const auto e = env_of({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}});
  expect_one(run(world("srun", 2), e), Severity::Error, Scope::Job,
             {"srun started 4 tasks", "SLURM_STEP_NUM_TASKS=4", "MPI sees 2 ranks", "--mpi=pmix", "job 12"});
}

TEST(LaunchChecks, SrunWithoutMpiPluginStartsSingletons) {
  // `srun --mpi=none -n 4`: four processes, each a world of one.
  const auto e = env_of({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "4"},
                         {"SLURM_STEP_NUM_TASKS", "4"}});
  expect_one(run(world("none", 1), e), Severity::Error, Scope::Job,
             {"srun started 4 tasks", "MPI world size 1", "4 unrelated models", "srun --mpi=pmix"});
}

TEST(LaunchChecks, SrunStepCountFallsBackToNtasks) {
  const auto e = env_of({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"}});
  expect_one(run(world("srun", 4), e), Severity::Error, Scope::Job, {"SLURM_NTASKS=8", "MPI sees 4"});
}

TEST(LaunchChecks, MpirunInsideAllocationWithAnotherNp) {
  // `sbatch -n 4` then `mpirun -np 2` in the batch script: the ranks inherit the batch
  // environment (no SLURM_STEP_ID, SLURM_NTASKS=4, and SLURM_PROCID=0 on every rank).
  const auto e = env_of({{"SLURM_JOB_ID", "31"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}});
  expect_one(run(world("mpirun", 2), e), Severity::Error, Scope::Job,
             {"mpirun started 2 ranks", "job 31 has 4 tasks", "srun --mpi=pmix", "mpirun -np 4"});
  EXPECT_TRUE(run(world("mpirun", 4), e).empty());
}

TEST(LaunchChecks, MpirunRanksOnRemoteNodesAreNotJudged) {
  // mpirun starts its per-node daemons with srun: remote ranks see the daemons' step.
  const auto e = env_of({{"SLURM_JOB_ID", "31"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "1"},
                         {"SLURM_STEP_NUM_TASKS", "1"}});
  EXPECT_TRUE(run(world("mpirun", 16, 8, 2), e).empty());
}

TEST(LaunchChecks, TorchrunWorkersAreNotJudgedBySlurmsTaskCount) {
  // torchrun started by `srun --ntasks-per-node=1` on 2 nodes, 8 workers each; and torchrun
  // run straight from a one-task batch script: Slurm's counts are of torchrun, not its workers.
  EXPECT_TRUE(run(world("torchrun", 16, 8, 2), env_of({{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"},
                                                         {"SLURM_STEP_NUM_TASKS", "2"}}))
                  .empty());
  EXPECT_TRUE(run(world("torchrun", 8), env_of({{"SLURM_JOB_ID", "9"}, {"SLURM_NTASKS", "1"}})).empty());
}

TEST(LaunchChecks, OneProcessInAManyTaskAllocationIsAWarning) {
  const auto e = env_of({{"SLURM_JOB_ID", "5"}, {"SLURM_NTASKS", "4"}});
  expect_one(run(world("none", 1), e), Severity::Warning, Scope::Job,
             {"job 5 has 4 tasks", "one process", "srun --mpi=pmix"});
  EXPECT_TRUE(run(world("none", 1), env_of({{"SLURM_JOB_ID", "5"}, {"SLURM_NTASKS", "1"}})).empty());
}

TEST(LaunchChecks, CountsThatAreNotPlainNumbersAreIgnored) {
  const auto e = env_of({{"SLURM_JOB_ID", "5"}, {"SLURM_NTASKS", "4(x2)"}});
  EXPECT_TRUE(run(world("mpirun", 2), e).empty());
}

// ---- GPUs ----------------------------------------------------------------------------------

LaunchEnv gpu_job(std::map<std::string, std::string> extra, int cuda_devices, bool cuda_build = true) {
  extra.emplace("SLURM_JOB_ID", "40");
  extra.emplace("SLURM_STEP_ID", "0");
  LaunchEnv e = env_of(std::move(extra));
  e.cuda_build = cuda_build;
  e.cuda_devices = cuda_devices;
  return e;
}

TEST(LaunchChecks, NoGpuCheckWhenNoGpusWereAskedFor) {
  // A CPU job (even of a CUDA build, even with GPUs in the machine) is not judged.
  EXPECT_TRUE(run(world("srun", 8), gpu_job({}, -1)).empty());
  EXPECT_TRUE(run(world("srun", 8), gpu_job({{"SLURM_GPUS_ON_NODE", "0"}}, -1)).empty());
}

TEST(LaunchChecks, OneRankPerVisibleGpu) {
  EXPECT_TRUE(run(world("srun", 8), gpu_job({{"SLURM_GPUS_ON_NODE", "8"}}, 8)).empty());
  EXPECT_TRUE(
      run(world("srun", 8), gpu_job({{"SLURM_JOB_GPUS", "0,1,2,3,4,5,6,7"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}}, 8))
          .empty());
}

TEST(LaunchChecks, MoreRanksThanDevices) {
  expect_one(run(world("srun", 8), gpu_job({{"SLURM_GPUS_ON_NODE", "4"}}, 4)), Severity::Error, Scope::Node,
             {"8 ranks on node7 but 4 GPU(s) visible", "CUDA device count 4", "GPUS_PER_NODE=4",
              "--ntasks-per-node=4"});
}

TEST(LaunchChecks, CudaVisibleDevicesLimitsTheCount) {
  const auto e = gpu_job({{"SLURM_STEP_GPUS", "0,1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}, 8);
  expect_one(run(world("srun", 8), e), Severity::Error, Scope::Node,
             {"2 GPU(s) visible", "CUDA_VISIBLE_DEVICES='0,1'"});
  // The runtime stops at the first invalid entry; an empty value or Slurm's NoDevFiles hides all.
  expect_one(run(world("srun", 2), gpu_job({{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "0,-1,1"}}, -1)),
             Severity::Error, Scope::Node, {"1 GPU(s) visible"});
  expect_one(run(world("srun", 2), gpu_job({{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", ""}}, 2)),
             Severity::Error, Scope::Node, {"0 GPU(s) visible"});
  expect_one(run(world("srun", 2), gpu_job({{"SLURM_GPUS_ON_NODE", "2"}, {"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}, 2)),
             Severity::Error, Scope::Node, {"0 GPU(s) visible"});
}

TEST(LaunchChecks, OneGpuBoundPerTaskIsFine) {
  // srun --gpus-per-task=1: each rank sees exactly its own GPU.
  const auto e = gpu_job({{"SLURM_STEP_GPUS", "3"}, {"CUDA_VISIBLE_DEVICES", "3"}, {"SLURM_GPUS_PER_TASK", "1"}}, 1);
  EXPECT_TRUE(run(world("srun", 8), e).empty());
  // The same single GPU without per-task binding: eight ranks would share it.
  const auto shared = gpu_job({{"SLURM_STEP_GPUS", "3"}, {"CUDA_VISIBLE_DEVICES", "3"}}, 1);
  expect_one(run(world("srun", 8), shared), Severity::Error, Scope::Node, {"1 GPU(s) visible"});
}

TEST(LaunchChecks, GpusAskedOfABuildWithoutCuda) {
  expect_one(run(world("srun", 8), gpu_job({{"SLURM_GPUS_ON_NODE", "8"}}, -1, /*cuda_build=*/false)),
             Severity::Error, Scope::Node,
             {"SLURM_GPUS_ON_NODE=8", "built without the CUDA backend", "8 rank(s) on node7", "GPUS_PER_NODE=0"});
}

// ---- Checkpoint directory ------------------------------------------------------------------

LaunchEnv fs_env(int64_t type, std::string* asked = nullptr) {
  LaunchEnv e;
  e.fs_type = [type, asked](const std::string& path) -> std::optional<int64_t> {
    if (asked != nullptr) *asked = path;
    return type;
  };
  return e;
}

TEST(LaunchChecks, NodeLocalCheckpointDirInAMultiNodeJob) {
  config::Config cfg;
  cfg.run.dir = "/scratch/run1";
  std::string asked;
  expect_one(run(world("srun", 16, 8, 2), fs_env(0xEF53, &asked), cfg), Severity::Warning, Scope::Node,
             {"checkpoint.dir /scratch/run1/checkpoints", "node-local filesystem (ext4) on node7", "spans 2 nodes",
              "every node mounts"});
  EXPECT_EQ(asked, "/scratch/run1/checkpoints");
  cfg.checkpoint.dir = "/tmp/ck";
  expect_one(run(world("srun", 16, 8, 2), fs_env(0x01021994), cfg), Severity::Warning, Scope::Node,
             {"checkpoint.dir /tmp/ck", "(tmpfs)"});
}

TEST(LaunchChecks, SharedOrUnknownFilesystemsOrOneNodeSayNothing) {
  config::Config cfg;
  for (int64_t shared : {0x6969L, 0x0BD00BD0L, 0x47504653L, 0x19830326L, 0x18031977L, 0x65735546L, 0x12345678L}) {
    EXPECT_TRUE(run(world("srun", 16, 8, 2), fs_env(shared), cfg).empty()) << std::hex << shared;
  }
  EXPECT_TRUE(run(world("srun", 8, 8, 1), fs_env(0xEF53), cfg).empty());  // one node: local is fine
  LaunchEnv unreadable;
  unreadable.fs_type = [](const std::string&) { return std::optional<int64_t>{}; };
  EXPECT_TRUE(run(world("srun", 16, 8, 2), unreadable, cfg).empty());
}

// The probe (a file rank 0 writes, each node looks for) settles what the type only suggests.
TEST(LaunchChecks, ProbedCheckpointDirSharedByEveryNodeSaysNothingWhateverItsType) {
  config::Config cfg;
  LaunchEnv e = fs_env(0xEF53);  // ext4, exported to every node (or one disk seen through namespaces)
  e.checkpoint_dir_unseen_by = std::vector<std::string>{};
  EXPECT_TRUE(run(world("srun", 4, 2, 2), e, cfg).empty());
}

TEST(LaunchChecks, ProbedCheckpointDirThatANodeDoesNotSeeStopsTheJob) {
  config::Config cfg;
  cfg.checkpoint.dir = "/local/ckpt";
  LaunchEnv e = fs_env(0x01021994);  // tmpfs
  e.checkpoint_dir_unseen_by = std::vector<std::string>{"fsdp-n2"};
  expect_one(run(world("srun", 4, 2, 2), e, cfg), Severity::Error, Scope::Job,
             {"checkpoint.dir /local/ckpt is not shared by the job's 2 nodes: fsdp-n2 does not see the file rank 0 "
              "wrote there (tmpfs on node7); each node would keep only its own ranks' shards",
              "every node mounts"});
  // On a filesystem type that nodes share, a node that missed the file may be looking
  // through a stale cache: a warning, not a refusal.
  LaunchEnv nfs = fs_env(0x6969);
  nfs.checkpoint_dir_unseen_by = std::vector<std::string>{"n3", "n4"};
  expect_one(run(world("srun", 8, 2, 4), nfs, cfg), Severity::Warning, Scope::Job,
             {"n3, n4 do not see the file rank 0 wrote there (nfs on node7) (or its cache has not caught up)"});
}

TEST(LaunchChecks, ClassifyFilesystem) {
  using K = Filesystem::Kind;
  EXPECT_EQ(classify_filesystem(0xEF53).name, "ext4");
  EXPECT_EQ(classify_filesystem(0x58465342).kind, K::Local);
  EXPECT_EQ(classify_filesystem(0x6969).name, "nfs");
  EXPECT_EQ(classify_filesystem(0x0BD00BD0).kind, K::Shared);
  EXPECT_EQ(classify_filesystem(0x47504653).name, "gpfs");
  EXPECT_EQ(classify_filesystem(0x19830326).name, "beegfs");
  EXPECT_EQ(classify_filesystem(0x18031977).name, "wekafs");
  EXPECT_EQ(classify_filesystem(0x65735546).kind, K::Unknown);  // FUSE: could be anything
  // A sign-extended f_type (signed long on some ABIs) is the same filesystem.
  EXPECT_EQ(classify_filesystem(int64_t(int32_t(0xFF534D42u))).name, "cifs");
  EXPECT_EQ(classify_filesystem(0x1234).kind, K::Unknown);
}

TEST(LaunchChecks, RealEnvironmentReadsStatfsOfTheNearestExistingDirectory) {
  const LaunchEnv e = read_launch_env();
  ASSERT_TRUE(e.fs_type);
  char tmpl[] = "/tmp/fsdp_launch_checks_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::optional<int64_t> here = e.fs_type(dir);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(e.fs_type(dir + "/not/yet/created/checkpoints"), here);  // resolved to `dir`
  rmdir(tmpl);
}

}  // namespace
}  // namespace fsdp::train
