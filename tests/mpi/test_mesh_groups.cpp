// The device mesh's communicators under mpiexec (1, 2 and 4 ranks): split_process_groups
// with a tensor or an expert dimension (or both) makes tensor, expert, expert-shard, shard and
// replicate groups whose members are the
// mesh's (dist/mesh.h), in its order, and each carries collectives among exactly those
// ranks; a layout the world cannot hold throws on every rank alike, naming the key.
#include <gtest/gtest.h>

#include "fsdp/dist/communicator.h"
#include "mpi_test_env.h"

namespace fsdp::dist {
namespace {

// Sum over the group of (world rank + 1), by an all-reduce on it.
double summed_ranks(Communicator& c, int world_rank) {
  Tensor x = Tensor::zeros({1}, DType::F64);
  x.set_flat(0, world_rank + 1.0);
  c.wait(c.all_reduce(x));
  return x.get_flat(0);
}

double expected_sum(const std::vector<int>& members) {
  double s = 0;
  for (int r : members) s += r + 1.0;
  return s;
}

void expect_groups_follow_the_mesh(const MeshSpec& spec) {
  ProcessGroups& world = test::world_groups();
  const int n = world.world->size(), me = world.world->rank();
  if (mesh_problem(spec, n, world.world_info.node_of_rank)) GTEST_SKIP() << "layout needs more ranks";
  const ProcessGroups g = split_process_groups(world, spec);
  const DeviceMesh& m = g.mesh;
  EXPECT_EQ(m.shape().tensor, spec.tensor);
  EXPECT_EQ(m.world_size(), n);
  const std::vector<int> tensor = m.group(me, {MeshDim::Tensor});
  const std::vector<int> shard = m.group(me, {MeshDim::Shard, MeshDim::Expert});
  const std::vector<int> replicate = m.group(me, {MeshDim::Replicate});
  const std::vector<int> expert = m.group(me, {MeshDim::Expert});
  const std::vector<int> expert_shard = m.group(me, {MeshDim::Shard});
  EXPECT_EQ(m.shape().expert, spec.expert);
  EXPECT_EQ(g.expert->world_ranks(), expert);
  EXPECT_EQ(g.expert_shard->world_ranks(), expert_shard);
  EXPECT_EQ(g.expert->name(), "expert");
  EXPECT_EQ(summed_ranks(*g.expert, me), expected_sum(expert));
  EXPECT_EQ(summed_ranks(*g.expert_shard, me), expected_sum(expert_shard));
  // The shard group is shard x expert: the expert units' group and the expert groups tile it.
  EXPECT_EQ(g.shard->size(), g.expert->size() * g.expert_shard->size());
  EXPECT_EQ(g.tensor->world_ranks(), tensor);
  EXPECT_EQ(g.shard->world_ranks(), shard);
  EXPECT_EQ(g.replicate->world_ranks(), replicate);
  EXPECT_EQ(g.tensor->rank(), m.tensor_rank(me));
  EXPECT_EQ(g.tensor->name(), "tensor");
  EXPECT_EQ(summed_ranks(*g.tensor, me), expected_sum(tensor));
  EXPECT_EQ(summed_ranks(*g.shard, me), expected_sum(shard));
  EXPECT_EQ(summed_ranks(*g.replicate, me), expected_sum(replicate));
  // An expert group's ranks hold the same tensor slices (Note [Experts under expert and
  // tensor parallelism]): they trade rows of the same tensor index, and an expert unit's
  // shard group holds the same experts' same slices.
  for (int r : expert) EXPECT_EQ(m.tensor_rank(r), m.tensor_rank(me)) << "expert group member " << r;
  for (int r : expert_shard) EXPECT_EQ(m.tensor_rank(r), m.tensor_rank(me)) << "expert shard member " << r;
  // Tensor groups are consecutive ranks here (one node, block mapping).
  for (size_t i = 0; i < tensor.size(); ++i) EXPECT_EQ(tensor[i], me - m.tensor_rank(me) + int(i));
}

TEST(MeshGroups, TensorTwoFullShard) { expect_groups_follow_the_mesh({2, 0}); }
TEST(MeshGroups, TensorTwoNoShard) { expect_groups_follow_the_mesh({2, 1}); }
TEST(MeshGroups, TensorFour) { expect_groups_follow_the_mesh({4, 0}); }
TEST(MeshGroups, WithoutTensorParallelismHybridTwo) { expect_groups_follow_the_mesh({1, 2}); }
TEST(MeshGroups, ExpertTwoFullShard) { expect_groups_follow_the_mesh({1, 0, 2}); }
TEST(MeshGroups, ExpertFour) { expect_groups_follow_the_mesh({1, 0, 4}); }
TEST(MeshGroups, ExpertTwoHybridTwo) { expect_groups_follow_the_mesh({1, 2, 2}); }
TEST(MeshGroups, ExpertTwoTensorTwo) { expect_groups_follow_the_mesh({2, 0, 2}); }

TEST(MeshGroups, ALayoutTheWorldCannotHoldThrowsOnEveryRank) {
  ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const int t = n + 1;
  try {
    split_process_groups(world, MeshSpec{t, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("parallel.tensor " + std::to_string(t) + " must divide the world size (" + std::to_string(n) +
                        " ranks)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("(rank " + std::to_string(world.world->rank()) + ")"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace fsdp::dist
