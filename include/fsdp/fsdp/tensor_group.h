// The model's tensor-parallel group (model::TensorGroup) over a communicator of the device
// mesh (ProcessGroups::tensor): the bridge that lets the model run its collectives without
// seeing ranks. Each call waits for its collective: tensor-parallel collectives gate the
// computation right after them (the next GEMM reads the gathered rows), so they are on the
// critical path.
//
// Note [Tensor-parallel collectives on a GPU]
// On CUDA the tensor group is an NCCL communicator of its own (make_nccl_process_groups in
// dist/nccl.h builds it over the host tensor group, which split_process_groups made from the
// one dist::DeviceMesh), with its own communication stream, beside the shard and replicate
// groups' streams that carry the FSDP engine's all-gathers and reduce-scatters. Ordering
// (Note [NCCL stream ordering]):
//   - issue: the tensor stream waits for the compute stream (the rows or partial sums the
//     collective reads were written there), then runs the NCCL call;
//   - wait, at once (every call here): the compute stream waits for the tensor stream.
// So each sequence-parallel all-gather / reduce-scatter, the vocabulary-parallel
// cross-entropy's all-gather of statistics and the embedding's reduce-scatter sit in the
// compute stream's order between the kernel that produces their input and the one that
// consumes their output: on the critical path, by design, as in Megatron-LM without its
// overlap options. The host never blocks (waits are stream waits). Meanwhile the FSDP
// engine's next-unit all-gather and previous-unit reduce-scatter stay on the shard stream
// and overlap both compute and the tensor collectives. The engine's all-reduce of the
// norm weights' gradients over the tensor group (FsdpEngine::reduce_gradient) is issued
// after the unit's backward and waited before its reduce-scatter is issued, which reads
// those gradients: it also delays the compute stream, by one all-reduce of a few norm
// vectors per unit. Every rank issues the tensor and shard collectives in the same program
// order, as NCCL requires of communicators that share a GPU.
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
