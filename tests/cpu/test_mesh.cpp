// The device mesh (dist/mesh.h) as pure arithmetic: where each rank sits in
// [replicate, shard, expert, tensor], its groups along any dimensions, the data-parallel
// rank the loader reads by, ranks ordered node by node, and every layout a world cannot
// hold, with its message (expert parallelism's too). The MPI side (the communicators built
// from it) is tests/mpi/test_mesh_groups.cpp's.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "fsdp/core/error.h"
#include "fsdp/dist/mesh.h"

namespace fsdp::dist {
namespace {

std::vector<int> one_node(int n) { return std::vector<int>(size_t(n), 0); }
std::vector<int> block_nodes(int nodes, int per) {
  std::vector<int> v;
  for (int n = 0; n < nodes; ++n)
    for (int i = 0; i < per; ++i) v.push_back(n);
  return v;
}

TEST(DeviceMesh, ShapeFromTheSpec) {
  // 8 ranks, 2 nodes of 4: T=2, FULL_SHARD over the 4 data-parallel ranks.
  EXPECT_EQ(resolve_mesh_shape({2, 0}, 8, block_nodes(2, 4)), (MeshShape{1, 4, 1, 2}));
  // HYBRID_SHARD by node: a node's 4 ranks hold 2 tensor groups -> shard 2, replicate 2.
  EXPECT_EQ(resolve_mesh_shape({2, -1}, 8, block_nodes(2, 4)), (MeshShape{2, 2, 1, 2}));
  EXPECT_EQ(resolve_mesh_shape({2, 1}, 8, block_nodes(2, 4)), (MeshShape{4, 1, 1, 2}));  // NO_SHARD
  EXPECT_EQ(resolve_mesh_shape({1, 2}, 4, one_node(4)), (MeshShape{2, 2, 1, 1}));
  EXPECT_EQ(resolve_mesh_shape({4, 0}, 4, one_node(4)), (MeshShape{1, 1, 1, 4}));
  EXPECT_EQ((MeshShape{2, 2, 1, 2}).str(), "2x2x2");
  EXPECT_EQ((MeshShape{1, 4, 1, 1}).str(), "1x4x1");
  EXPECT_EQ((MeshShape{1, 2, 2, 2}).str(), "1x2x2x2");
}

TEST(DeviceMesh, TensorInnermostAndGroupsOfEveryKind) {
  const DeviceMesh m(MeshShape{2, 2, 1, 2}, one_node(8));
  // Position p = ((r * S + s) * E + e) * T + t: world rank 5 = (1, 0, 0, 1).
  EXPECT_EQ(m.coord(5), (DeviceMesh::Coord{1, 0, 0, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.world_rank(m.coord(r)), r);
  EXPECT_EQ(m.group(5, {MeshDim::Tensor}), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.group(5, {MeshDim::Shard}), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group(5, {MeshDim::Replicate}), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.group(5, {MeshDim::Replicate, MeshDim::Shard}), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.group_rank(5, {MeshDim::Tensor}), 1);
  EXPECT_EQ(m.group_rank(5, {MeshDim::Shard}), 0);
  EXPECT_EQ(m.group_rank(7, {MeshDim::Shard}), 1);
  // Data-parallel rank: replicate x shard x expert; the ranks of a tensor group share it.
  EXPECT_EQ(m.data_parallel_size(), 4);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.data_parallel_rank(r), r / 2);
  // Every group kind partitions the world, and colours number the groups 0 .. count-1.
  for (auto dims : {std::initializer_list<MeshDim>{MeshDim::Tensor}, {MeshDim::Shard}, {MeshDim::Replicate},
                    {MeshDim::Shard, MeshDim::Expert}}) {
    std::set<int> seen, colors;
    for (int r = 0; r < 8; ++r) {
      const std::vector<int> g = m.group(r, dims);
      EXPECT_EQ(g[size_t(m.group_rank(r, dims))], r);
      for (int q : g) EXPECT_EQ(m.group_color(q, dims), m.group_color(r, dims));
      seen.insert(g.begin(), g.end());
      colors.insert(m.group_color(r, dims));
    }
    EXPECT_EQ(seen.size(), 8u);
    EXPECT_EQ(*colors.rbegin(), int(colors.size()) - 1);
  }
}

TEST(DeviceMesh, WithoutTensorParallelismTheGroupsAreFsdpsOwn) {
  // HYBRID_SHARD 2 on 4 ranks, as before the mesh: shard groups of consecutive ranks,
  // replicate groups of the ranks at the same place of theirs.
  const DeviceMesh m(resolve_mesh_shape({1, 2}, 4, one_node(4)), one_node(4));
  EXPECT_EQ(m.group(2, {MeshDim::Shard}), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.group(2, {MeshDim::Replicate}), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.group(2, {MeshDim::Tensor}), (std::vector<int>{2}));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(m.data_parallel_rank(r), r);
}

TEST(DeviceMesh, RanksAreOrderedNodeByNode) {
  // A round-robin mapping (rank r on node r % 2): a tensor group is still two ranks of one
  // node, and a node's ranks form the shard group of HYBRID_SHARD by node.
  const std::vector<int> nodes = {0, 1, 0, 1, 0, 1, 0, 1};
  const DeviceMesh m(resolve_mesh_shape({2, -1}, 8, nodes), nodes);
  EXPECT_EQ(m.shape(), (MeshShape{2, 2, 1, 2}));
  EXPECT_EQ(m.group(0, {MeshDim::Tensor}), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.group(1, {MeshDim::Tensor}), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.group(0, {MeshDim::Shard}), (std::vector<int>{0, 4}));
  EXPECT_EQ(m.group(0, {MeshDim::Replicate}), (std::vector<int>{0, 1}));
  for (int r = 0; r < 8; ++r)
    for (int q : m.group(r, {MeshDim::Tensor})) EXPECT_EQ(nodes[size_t(q)], nodes[size_t(r)]);
}

std::string problem(const MeshSpec& spec, int world, const std::vector<int>& nodes) {
  const auto p = mesh_problem(spec, world, nodes);
  return p ? p->key + " " + p->text() : "none";
}

TEST(DeviceMesh, EveryRefusedLayoutNamesItsKey) {
  EXPECT_EQ(problem({2, 0}, 4, one_node(4)), "none");
  EXPECT_EQ(problem({3, 0}, 4, one_node(4)),
            "parallel.tensor 3 must divide the world size (4 ranks): the world is made of whole tensor groups; use a "
            "divisor of 4");
  EXPECT_EQ(problem({2, 0}, 1, one_node(1)),
            "parallel.tensor 2 must divide the world size (1 ranks): the world is made of whole tensor groups; use a "
            "divisor of 1");
  // 6 ranks on nodes of 3 (the world divides, a node does not).
  EXPECT_EQ(problem({2, 0}, 6, block_nodes(2, 3)),
            "parallel.tensor 2 must divide the ranks of every node, but node 0 runs 3: a tensor group stays inside "
            "one node (its collectives are on the critical path of every layer); run a multiple of 2 ranks per node");
  EXPECT_EQ(problem({2, 3}, 8, one_node(8)),
            "fsdp.shard_group_size 3 does not divide the 4 data-parallel ranks (world size 8 / parallel.tensor 2); "
            "use a divisor of 4, or 0 for the ranks of one node");
  EXPECT_EQ(problem({1, 3}, 4, one_node(4)),
            "fsdp.shard_group_size 3 does not divide the world size 4; use a divisor of 4, or 0 for the ranks of one "
            "node");
  EXPECT_EQ(problem({1, -1}, 3, std::vector<int>{0, 0, 1}),
            "fsdp.shard_group_size 0 (the ranks of one node) needs the same number of ranks on every node, but nodes "
            "run between 1 and 2 ranks; set fsdp.shard_group_size to a divisor of the world size 3");
  EXPECT_EQ(problem({0, 0}, 4, one_node(4)), "parallel.tensor must be >= 1, got 0; 1 turns it off");
  try {
    resolve_mesh_shape({3, 0}, 4, one_node(4));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("parallel.tensor 3 must divide the world size (4 ranks)", 0), 0u) << e.what();
  }
  try {
    resolve_mesh_shape({1, 3}, 4, one_node(4), 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "fsdp.shard_group_size 3 does not divide the world size 4 (rank 2); use a divisor of 4, or 0 for the "
              "ranks of one node");
  }
}

TEST(DeviceMesh, ExpertParallelismBorrowsFromTheShardGroup) {
  // FULL_SHARD on 8 ranks with E=2: the shard group (shard x expert) is every rank, as
  // without expert parallelism; experts split over pairs of consecutive ranks, each expert
  // unit sharded over the 4 ranks holding the same experts.
  const MeshShape full = resolve_mesh_shape({1, 0, 2}, 8, one_node(8));
  EXPECT_EQ(full, (MeshShape{1, 4, 2, 1}));
  EXPECT_EQ(full.str(), "1x4x2x1");
  const DeviceMesh m(full, one_node(8));
  EXPECT_EQ(m.group(5, {MeshDim::Shard, MeshDim::Expert}), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.group(5, {MeshDim::Expert}), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.group(5, {MeshDim::Shard}), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.group_rank(5, {MeshDim::Expert}), 1);
  EXPECT_EQ(m.data_parallel_size(), 8);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(m.data_parallel_rank(r), r);  // every rank reads its own batch
  // HYBRID_SHARD groups of 4 with E=2: replicate 2, shard 2, expert 2.
  EXPECT_EQ(resolve_mesh_shape({1, 4, 2}, 8, one_node(8)), (MeshShape{2, 2, 2, 1}));
  // HYBRID_SHARD by node (2 nodes of 4) with E=4: a node's ranks are one expert group.
  const MeshShape node = resolve_mesh_shape({1, -1, 4}, 8, block_nodes(2, 4));
  EXPECT_EQ(node, (MeshShape{2, 1, 4, 1}));
  const DeviceMesh n(node, block_nodes(2, 4));
  EXPECT_EQ(n.group(6, {MeshDim::Expert}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(n.group(6, {MeshDim::Replicate}), (std::vector<int>{2, 6}));
}

TEST(DeviceMesh, ExpertLayoutsTheWorldCannotHoldNameTheKey) {
  EXPECT_EQ(problem({1, 0, 0}, 4, one_node(4)), "parallel.expert must be >= 1, got 0; 1 turns it off");
  EXPECT_EQ(problem({1, 0, 3}, 4, one_node(4)),
            "parallel.expert 3 must divide the 4 data-parallel ranks: the experts are spread over data-parallel "
            "ranks; use a divisor of 4");
  // NO_SHARD: a shard group of one rank.
  EXPECT_EQ(problem({1, 1, 2}, 4, one_node(4)),
            "parallel.expert 2 must divide the shard group of 1 data-parallel rank (fsdp.sharding_strategy and "
            "fsdp.shard_group_size): the expert group is borrowed from the ranks that shard the other parameters; "
            "NO_SHARD has no shard group to borrow from: use FULL_SHARD, SHARD_GRAD_OP or HYBRID_SHARD");
  // HYBRID_SHARD groups of 2 cannot hold an expert group of 4.
  EXPECT_EQ(problem({1, 2, 4}, 8, one_node(8)),
            "parallel.expert 4 must divide the shard group of 2 data-parallel ranks (fsdp.sharding_strategy and "
            "fsdp.shard_group_size): the expert group is borrowed from the ranks that shard the other parameters; "
            "use a divisor of 2, or a HYBRID_SHARD fsdp.shard_group_size that is a multiple of 4");
  try {
    resolve_mesh_shape({1, 0, 3}, 4, one_node(4), 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "parallel.expert 3 must divide the 4 data-parallel ranks: the experts are spread over data-parallel "
              "ranks (rank 1); use a divisor of 4");
  }
}

}  // namespace
}  // namespace fsdp::dist
