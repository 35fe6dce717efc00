// The model's expert group (model::ExpertGroup) over a communicator of the device mesh
// (ProcessGroups::expert): the bridge that lets the model trade tokens between expert ranks
// without seeing ranks. Each call waits for its collective: the expert GEMMs read what the
// dispatch brings, and the combine what comes back (Note [Expert-parallel dispatch] in
// model/moe_dispatch.h). On the CPU an MPI communicator, where that wait blocks the host; on
// a GPU the engine's NCCL expert group (make_nccl_process_groups), where it makes the
// compute stream wait for the comm stream and the host goes on (Note [NCCL stream ordering]
// in dist/nccl.h): the kernels and copies enqueued after it read the result, and the one
// host read-back of the counts (Note [Expert counts on a GPU]) waits for that stream.
#pragma once

#include "fsdp/dist/communicator.h"
#include "fsdp/model/expert_parallel.h"

namespace fsdp {

class CommExpertGroup final : public model::ExpertGroup {
 public:
  explicit CommExpertGroup(dist::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(const Tensor& shard, const Tensor& full) override { comm_.wait(comm_.all_gather(shard, full)); }
  void all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                    const std::vector<int64_t>& recv_counts) override {
    comm_.wait(comm_.all_to_all_v(send, send_counts, recv, recv_counts));
  }

 private:
  dist::Communicator& comm_;
};

}  // namespace fsdp
