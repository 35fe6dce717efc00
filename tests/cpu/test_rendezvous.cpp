// Where the ranks of a launch without MPI meet (fsdp/dist/rendezvous.h): torchrun's variables,
// Slurm's (srun without --mpi), which wins when both are set, the first host of a Slurm node
// list, the port, and each inconsistent setting named by its variable.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "fsdp/dist/rendezvous.h"
#include "test_util.h"

namespace fsdp::dist {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Rendezvous, TorchrunVariables) {
  const auto r = rendezvous_from_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"},
                                             {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"},
                                             {"TORCHELASTIC_RUN_ID", "abc"}}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->launcher, "torchrun");
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->local_rank, 3);
  EXPECT_EQ(r->local_rank_var, "LOCAL_RANK");
  EXPECT_EQ(r->master_addr, "node01");
  EXPECT_EQ(r->master_port, 29500);
  EXPECT_EQ(r->job, "torchrun abc node01:29500");
}

TEST(Rendezvous, NothingSetIsNoRendezvousAndOneRankNeedsNoStore) {
  EXPECT_FALSE(rendezvous_from_env(env_of({})).has_value());
  const auto one = rendezvous_from_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->world_size, 1);
  EXPECT_EQ(one->master_addr, "") << "a single process needs no MASTER_ADDR";
  // Inside the batch script (one task) or an allocation shell (no step): no rendezvous.
  EXPECT_FALSE(rendezvous_from_env(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "8"}})).has_value());
  EXPECT_FALSE(rendezvous_from_env(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"},
                                            {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}}))
                   .has_value());
}

TEST(Rendezvous, SrunWithoutMpiUsesSlurmsVariablesAndTheFirstHost) {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_JOB_ID", "4242"},      {"SLURM_STEP_ID", "1"},  {"SLURM_STEP_NUM_TASKS", "16"},
      {"SLURM_NTASKS", "32"},        {"SLURM_PROCID", "9"},   {"SLURM_LOCALID", "1"},
      {"SLURM_STEP_NODELIST", "gpu[07-08,11]"}, {"SLURM_JOB_NODELIST", "gpu[01-16]"}};
  const auto r = rendezvous_from_env(env_of(slurm));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->launcher, "srun");
  EXPECT_EQ(r->rank, 9);
  EXPECT_EQ(r->world_size, 16) << "the step's tasks, not the allocation's";
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->master_addr, "gpu07") << "rank 0 runs on the step's first node";
  EXPECT_EQ(r->master_port, 20000 + (4242 * 7 + 1) % 40000);
  EXPECT_NE(r->port_source.find("derived from SLURM_JOB_ID 4242 and SLURM_STEP_ID 1"), std::string::npos);
  EXPECT_EQ(r->job, "slurm 4242.1");
  // MASTER_ADDR / MASTER_PORT override; torchrun's variables win over Slurm's.
  auto with = slurm;
  with["MASTER_ADDR"] = "login2";
  with["MASTER_PORT"] = "31000";
  const auto o = rendezvous_from_env(env_of(with));
  EXPECT_EQ(o->master_addr, "login2");
  EXPECT_EQ(o->master_port, 31000);
  EXPECT_EQ(o->port_source, "MASTER_PORT");
  with["RANK"] = "0";
  with["WORLD_SIZE"] = "2";
  EXPECT_EQ(rendezvous_from_env(env_of(with))->launcher, "torchrun");
}

TEST(Rendezvous, FirstHostOfSlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node17"), "node17");
  EXPECT_EQ(first_slurm_host("gpu[03-05,09],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("gpu[09,03-05]"), "gpu09");
  EXPECT_EQ(first_slurm_host("a-[1-2]x[7,9]"), "a-1x7");
  EXPECT_EQ(first_slurm_host("login-a,login-b"), "login-a");
}

TEST(Rendezvous, InconsistentVariablesAreNamed) {
  test::expect_error([] { rendezvous_from_env(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}})); },
                     {"environment variable RANK=4 is not below WORLD_SIZE=4"});
  test::expect_error([] { rendezvous_from_env(env_of({{"RANK", "1"}})); }, {"environment variable WORLD_SIZE is not set"});
  test::expect_error([] { rendezvous_from_env(env_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}})); },
                     {"environment variable RANK=one is not a number"});
  test::expect_error([] { rendezvous_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})); },
                     {"RANK=1 and WORLD_SIZE=2 are set but MASTER_ADDR is not"});
  test::expect_error(
      [] { rendezvous_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})); },
      {"MASTER_PORT is not: set it to a free port on MASTER_ADDR h"});
  test::expect_error([] {
    rendezvous_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}));
  }, {"environment variable MASTER_PORT=70000 is not a number in [1, 65535]"});
  test::expect_error([] {
    rendezvous_from_env(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"},
                                {"SLURM_PROCID", "0"}}));
  }, {"srun started 2 tasks but none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or MASTER_ADDR says where rank 0 runs"});
}

}  // namespace
}  // namespace fsdp::dist
