// The device mesh: the one place that says which rank does what (DESIGN "Parallel
// dimensions"). The ranks of a job form a grid
//
//     [replicate, shard, expert, tensor]        tensor innermost
//
// position p = ((r * S + s) * E + e) * T + t holds the world rank order[p], where order
// lists the world ranks node by node (by node, then by world rank: the identity under
// the block mapping of mpirun and srun). So a tensor group is T consecutive positions, all
// on one node (T divides every node's ranks), and FSDP's groups are what they were
// before tensor parallelism, over the data-parallel ranks:
//   tensor      the T ranks holding the other slices of this rank's matrices
//   shard       the S ranks that shard a unit's flat parameter among themselves
//   replicate   the R ranks holding the same shard (HYBRID_SHARD(_ZERO2), NO_SHARD)
//   expert      the E ranks that split each MoE layer's experts among themselves and
//               trade tokens by all-to-all (expert parallelism, borrowed from the
//               data-parallel ranks as torchtitan's dp2ep); it sits between shard and
//               tensor so that an expert group stays inside a node where it can
// FSDP's shard group is shard x expert (so the non-expert parameters are sharded exactly as
// without expert parallelism), and the expert units shard over the shard dimension alone
// (the expert-data-parallel ranks: see ProcessGroups::expert_shard).
// The data-parallel rank (replicate x shard x expert, in that order) decides which samples
// a rank reads: the ranks of one tensor group read the same micro-batch.
//
// Everything here is pure arithmetic, testable without MPI; dist/communicator.h builds
// the communicators from it (split_process_groups), and the engine, the model and the
// loader ask it (through ProcessGroups::mesh) instead of computing ranks themselves.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::dist {

enum class MeshDim : int { Replicate = 0, Shard = 1, Expert = 2, Tensor = 3 };
inline constexpr int kMeshDims = 4;

struct MeshShape {
  int replicate = 1, shard = 1, expert = 1, tensor = 1;

  int size(MeshDim d) const;
  int world_size() const { return replicate * shard * expert * tensor; }
  int data_parallel() const { return replicate * shard * expert; }
  // "2x2x2": replicate x shard x tensor (x expert, once that is more than 1).
  std::string str() const;
  bool operator==(const MeshShape&) const = default;
};

// What a run asks for (train/launch_checks.h maps the config onto it).
struct MeshSpec {
  int tensor = 1;  // parallel.tensor
  // Data-parallel ranks per shard group (fsdp.shard_group_size, by strategy): 0 = all of
  // them, -1 = those of one node (every node must run as many ranks), k = k ranks.
  int shard_group_size = 0;
  // parallel.expert: the ranks each MoE layer's experts are split over, taken from the
  // shard group (which must be a multiple of it).
  int expert = 1;
};

// What is wrong with a layout: the config key to blame, the rest of the sentence ("4 must
// divide the world size (6 ranks)") and what to do instead ("use a divisor of 6").
struct MeshProblem {
  std::string key;  // "parallel.tensor", "fsdp.shard_group_size" or "parallel.expert"
  std::string message;
  std::string hint;
  std::string text() const { return message + "; " + hint; }
};

// The first problem of `spec` on `world_size` ranks, node_of_rank[r] being world rank r's
// node (0 .. nodes-1); nullopt when the layout is possible.
std::optional<MeshProblem> mesh_problem(const MeshSpec& spec, int world_size, const std::vector<int>& node_of_rank);
// The shape of a possible layout; throws fsdp::Error with mesh_problem's message otherwise
// (naming `rank` when it is >= 0).
MeshShape resolve_mesh_shape(const MeshSpec& spec, int world_size, const std::vector<int>& node_of_rank,
                             int rank = -1);

class DeviceMesh {
 public:
  using Coord = std::array<int, kMeshDims>;  // indexed by MeshDim

  DeviceMesh();  // one rank
  // node_of_rank as for mesh_problem; its size must be shape.world_size().
  DeviceMesh(const MeshShape& shape, const std::vector<int>& node_of_rank);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }

  Coord coord(int world_rank) const;
  int world_rank(const Coord& c) const;
  // The members of world_rank's group along `dims` (its other coordinates held), as world
  // ranks in group-rank order (the first dimension listed varies slowest).
  std::vector<int> group(int world_rank, std::initializer_list<MeshDim> dims) const;
  // world_rank's place in that group, and which of the groups of that kind it is in
  // (0 .. world_size / group size - 1): MPI_Comm_split's key and color.
  int group_rank(int world_rank, std::initializer_list<MeshDim> dims) const;
  int group_color(int world_rank, std::initializer_list<MeshDim> dims) const;

  // The data-parallel rank (replicate x shard x expert) and their count: which samples a
  // rank reads, in the trainer's global order.
  int data_parallel_rank(int world_rank) const;
  int data_parallel_size() const { return shape_.data_parallel(); }
  int tensor_rank(int world_rank) const { return coord(world_rank)[int(MeshDim::Tensor)]; }

 private:
  MeshShape shape_;
  std::vector<int> order_;     // position -> world rank
  std::vector<int> position_;  // world rank -> position
};

}  // namespace fsdp::dist
