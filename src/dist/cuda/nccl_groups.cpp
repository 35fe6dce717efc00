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
  // Every rank creates the shard communicator, then the replicate one, then the tensor one:
  // the NCCL bootstraps (a broadcast over each host group) match one to one on every rank.
  g.shard = on_device(host.shard, cuda_device);
  g.replicate = on_device(host.replicate, cuda_device);
  g.tensor = on_device(host.tensor, cuda_device);
  return g;
}

}  // namespace fsdp::dist
#endif  // FSDP_WITH_NCCL
