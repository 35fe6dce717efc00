// The device mesh's arithmetic; see mesh.h.
#include "fsdp/dist/mesh.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "fsdp/core/error.h"

namespace fsdp::dist {

int MeshShape::size(MeshDim d) const {
  switch (d) {
    case MeshDim::Replicate: return replicate;
    case MeshDim::Shard: return shard;
    case MeshDim::Expert: return expert;
    case MeshDim::Tensor: return tensor;
  }
  return 1;
}

std::string MeshShape::str() const {
  if (expert > 1) return fmt::format("{}x{}x{}x{}", replicate, shard, expert, tensor);
  return fmt::format("{}x{}x{}", replicate, shard, tensor);
}

namespace {

// Ranks per node, by node index.
std::vector<int> node_sizes(const std::vector<int>& node_of_rank) {
  std::vector<int> sizes;
  for (int n : node_of_rank) {
    FSDP_CHECK(n >= 0 && n < int(node_of_rank.size()), "device mesh: node index {} out of range", n);
    if (n >= int(sizes.size())) sizes.resize(size_t(n) + 1, 0);
    ++sizes[size_t(n)];
  }
  return sizes;
}

// The expert degree against the shard group it is borrowed from (dp2ep): the experts are
// split over E ranks of every shard group, so E divides the group; the expert units are then
// sharded over the group's other group / E ranks. NO_SHARD's group is one rank: nothing to
// borrow from. With parallel.tensor T the data-parallel ranks are the world's / T (each
// expert rank is a tensor group: its experts' slices over T ranks).
std::optional<MeshProblem> expert_problem(const MeshSpec& spec, int dp, int group) {
  const int E = spec.expert;
  if (E < 1) return MeshProblem{"parallel.expert", fmt::format("must be >= 1, got {}", E), "1 turns it off"};
  if (E == 1) return std::nullopt;
  if (dp % E != 0) {
    const std::string tensor =
        spec.tensor > 1 ? fmt::format(" (world size {} / parallel.tensor {})", dp * spec.tensor, spec.tensor) : "";
    return MeshProblem{"parallel.expert",
                       fmt::format("{} must divide the {} data-parallel ranks{}: the experts are spread over "
                                   "data-parallel ranks",
                                   E, dp, tensor),
                       fmt::format("use a divisor of {}", dp)};
  }
  if (group % E != 0) {
    return MeshProblem{"parallel.expert",
                       fmt::format("{} must divide the shard group of {} data-parallel rank{} (fsdp.sharding_strategy "
                                   "and fsdp.shard_group_size): the expert group is borrowed from the ranks that shard "
                                   "the other parameters",
                                   E, group, group == 1 ? "" : "s"),
                       group == 1 ? std::string("NO_SHARD has no shard group to borrow from: use FULL_SHARD, "
                                                "SHARD_GRAD_OP or HYBRID_SHARD")
                                  : fmt::format("use a divisor of {}, or a HYBRID_SHARD fsdp.shard_group_size that is a "
                                                "multiple of {}",
                                                group, E)};
  }
  return std::nullopt;
}

}  // namespace

std::optional<MeshProblem> mesh_problem(const MeshSpec& spec, int world, const std::vector<int>& node_of_rank) {
  FSDP_CHECK(world >= 1 && int(node_of_rank.size()) == world, "device mesh: {} node indices for a world of {}",
             node_of_rank.size(), world);
  const int T = spec.tensor;
  if (T < 1) return MeshProblem{"parallel.tensor", fmt::format("must be >= 1, got {}", T), "1 turns it off"};
  if (world % T != 0) {
    return MeshProblem{"parallel.tensor",
                       fmt::format("{} must divide the world size ({} ranks): the world is made of whole tensor groups",
                                   T, world),
                       fmt::format("use a divisor of {}", world)};
  }
  const std::vector<int> sizes = node_sizes(node_of_rank);
  const auto [smallest, largest] = std::minmax_element(sizes.begin(), sizes.end());
  if (T > 1) {
    for (size_t n = 0; n < sizes.size(); ++n) {
      if (sizes[n] % T == 0) continue;
      return MeshProblem{"parallel.tensor",
                         fmt::format("{} must divide the ranks of every node, but node {} runs {}: a tensor group "
                                     "stays inside one node (its collectives are on the critical path of every "
                                     "layer)",
                                     T, n, sizes[n]),
                         fmt::format("run a multiple of {} ranks per node", T)};
    }
  }
  const int dp = world / T;
  const int s = spec.shard_group_size;
  const std::string of_dp = T == 1 ? fmt::format("the world size {}", world)
                                   : fmt::format("the {} data-parallel ranks (world size {} / parallel.tensor {})",
                                                 dp, world, T);
  if (s < -1) {
    return MeshProblem{"fsdp.shard_group_size", fmt::format("{} is not a group size", s),
                       fmt::format("use a divisor of {}, or 0 for the ranks of one node", of_dp)};
  }
  if (s == -1 && *smallest != *largest) {
    return MeshProblem{"fsdp.shard_group_size",
                       fmt::format("0 (the ranks of one node) needs the same number of ranks on every node, but "
                                   "nodes run between {} and {} ranks",
                                   *smallest, *largest),
                       fmt::format("set fsdp.shard_group_size to a divisor of {}", of_dp)};
  }
  if (s > 0 && dp % s != 0) {
    return MeshProblem{"fsdp.shard_group_size", fmt::format("{} does not divide {}", s, of_dp),
                       fmt::format("use a divisor of {}, or 0 for the ranks of one node", dp)};
  }
  return expert_problem(spec, dp, s == 0 ? dp : s == -1 ? *smallest / T : s);
}

MeshShape resolve_mesh_shape(const MeshSpec& spec, int world, const std::vector<int>& node_of_rank, int rank) {
  if (const auto p = mesh_problem(spec, world, node_of_rank)) {
    if (rank >= 0) FSDP_FAIL("{} {} (rank {}); {}", p->key, p->message, rank, p->hint);
    FSDP_FAIL("{} {}", p->key, p->text());
  }
  const int dp = world / spec.tensor;
  int s = spec.shard_group_size;
  if (s == 0) s = dp;
  if (s == -1) s = node_sizes(node_of_rank).front() / spec.tensor;
  MeshShape shape;
  shape.tensor = spec.tensor;
  shape.expert = spec.expert;
  shape.shard = s / spec.expert;
  shape.replicate = dp / s;
  return shape;
}

DeviceMesh::DeviceMesh() : order_{0}, position_{0} {}

DeviceMesh::DeviceMesh(const MeshShape& shape, const std::vector<int>& node_of_rank) : shape_(shape) {
  const int n = shape.world_size();
  FSDP_CHECK(n >= 1 && int(node_of_rank.size()) == n, "device mesh {} needs {} ranks, got {} node indices",
             shape.str(), n, node_of_rank.size());
  order_.resize(size_t(n));
  std::iota(order_.begin(), order_.end(), 0);
  // Node by node, each node's ranks in world order: a stable sort by node.
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int a, int b) { return node_of_rank[size_t(a)] < node_of_rank[size_t(b)]; });
  position_.resize(size_t(n));
  for (int p = 0; p < n; ++p) position_[size_t(order_[size_t(p)])] = p;
}

DeviceMesh::Coord DeviceMesh::coord(int world_rank) const {
  FSDP_CHECK(world_rank >= 0 && world_rank < world_size(), "device mesh {}: no world rank {}", shape_.str(),
             world_rank);
  int p = position_[size_t(world_rank)];
  Coord c{};
  for (int d = kMeshDims - 1; d >= 0; --d) {
    const int size = shape_.size(MeshDim(d));
    c[size_t(d)] = p % size;
    p /= size;
  }
  return c;
}

int DeviceMesh::world_rank(const Coord& c) const {
  int p = 0;
  for (int d = 0; d < kMeshDims; ++d) {
    const int size = shape_.size(MeshDim(d));
    FSDP_CHECK(c[size_t(d)] >= 0 && c[size_t(d)] < size, "device mesh {}: coordinate {} out of range in dimension {}",
               shape_.str(), c[size_t(d)], d);
    p = p * size + c[size_t(d)];
  }
  return order_[size_t(p)];
}

std::vector<int> DeviceMesh::group(int world_rank, std::initializer_list<MeshDim> dims) const {
  Coord c = coord(world_rank);
  int members = 1;
  for (MeshDim d : dims) members *= shape_.size(d);
  std::vector<int> ranks;
  ranks.reserve(size_t(members));
  for (int i = 0; i < members; ++i) {
    int rest = i;
    for (auto d = std::rbegin(dims); d != std::rend(dims); ++d) {
      const int size = shape_.size(*d);
      c[size_t(*d)] = rest % size;
      rest /= size;
    }
    ranks.push_back(this->world_rank(c));
  }
  return ranks;
}

int DeviceMesh::group_rank(int world_rank, std::initializer_list<MeshDim> dims) const {
  const Coord c = coord(world_rank);
  int r = 0;
  for (MeshDim d : dims) r = r * shape_.size(d) + c[size_t(d)];
  return r;
}

int DeviceMesh::group_color(int world_rank, std::initializer_list<MeshDim> dims) const {
  const Coord c = coord(world_rank);
  int color = 0;
  for (int d = 0; d < kMeshDims; ++d) {
    if (std::find(dims.begin(), dims.end(), MeshDim(d)) != dims.end()) continue;
    color = color * shape_.size(MeshDim(d)) + c[size_t(d)];
  }
  return color;
}

int DeviceMesh::data_parallel_rank(int world_rank) const {
  return group_rank(world_rank, {MeshDim::Replicate, MeshDim::Shard, MeshDim::Expert});
}

}  // namespace fsdp::dist
