// make_nccl_process_groups (fsdp/dist/nccl.h): the FSDP engine's groups on CUDA. Built only
// where NCCL is (FSDP_WITH_NCCL), like the communicator itself.
#if defined(FSDP_WITH_NCCL)
#include "../detail.h"
#include "fsdp/dist/nccl.h"

namespace fsdp::dist {
namespace {

std::shared_ptr<Communicator> on_device(const std::shared_ptr<Communicator>& host, int cuda_device) {
  FSDP_CHECK(host != nullptr, "make_nccl_process_groups: a group is missing");
  if (host->size() == 1) return detail::make_local_communicator(host->name(), host->world_ranks().at(0));
  return make_nccl_communicator(*host, cuda_device);
}

}  // namespace

ProcessGroups make_nccl_process_groups(const ProcessGroups& host, int cuda_device) {
  ProcessGroups g;
  g.world_info = host.world_info;
  g.mesh = host.mesh;
  g.world = host.world;
  // Every rank creates the shard communicator, then the replicate one, the tensor one, the
  // expert one and the expert shard one: the NCCL bootstraps (a broadcast over each host
  // group) match one to one on every rank.
  g.shard = on_device(host.shard, cuda_device);
  g.replicate = on_device(host.replicate, cuda_device);
  g.tensor = on_device(host.tensor, cuda_device);
  g.expert = on_device(host.expert, cuda_device);
  // Without expert parallelism the expert shard group is the shard group's ranks and carries
  // nothing (there are no expert units): it shares the shard communicator rather than
  // holding a second NCCL communicator over the same ranks. The mesh is the same on every
  // rank, so every member of the group decides alike and the bootstraps still match.
  // With it (E > 1) every group is its own communicator, even where the expert group has
  // the shard group's ranks (FULL_SHARD over E ranks): the tokens' all-to-alls then run on a
  // stream of their own instead of queueing behind the next unit's all-gather on the
  // shard stream, and each group's byte and wait counters stay its own (Trainer::comm_bytes
  // sums the groups), as over MPI.
  g.expert_shard = host.mesh.shape().expert == 1 && host.expert_shard->world_ranks() == host.shard->world_ranks()
                       ? g.shard
                       : on_device(host.expert_shard, cuda_device);
  return g;
}

}  // namespace fsdp::dist
#endif  // FSDP_WITH_NCCL
