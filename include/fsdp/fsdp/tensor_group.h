// The model's tensor-parallel group (model::TensorGroup) over a communicator of the device
// mesh (ProcessGroups::tensor): the bridge that lets the model run its collectives without
// seeing ranks. Each call waits for its collective: tensor-parallel collectives gate the
// computation right after them (the next GEMM reads the gathered rows), so they are on the
// critical path; on a GPU the wait only orders the compute stream after NCCL's (Note [NCCL
// stream ordering]), and the host does not block.
#pragma once

#include "fsdp/dist/communicator.h"
#include "fsdp/model/tensor_parallel.h"

namespace fsdp {

class CommTensorGroup final : public model::TensorGroup {
 public:
  explicit CommTensorGroup(dist::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(const Tensor& shard, const Tensor& full) override { comm_.wait(comm_.all_gather(shard, full)); }
  void reduce_scatter(const Tensor& full, const Tensor& shard) override {
    comm_.wait(comm_.reduce_scatter(full, shard));
  }
  void all_reduce(const Tensor& x) override { comm_.wait(comm_.all_reduce(x)); }

 private:
  dist::Communicator& comm_;
};

}  // namespace fsdp
