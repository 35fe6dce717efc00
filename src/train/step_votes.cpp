// The per-step votes' one encoding; see step_votes.h.
#include "fsdp/train/step_votes.h"

#include "fsdp/plan/memory_plan.h"

namespace fsdp::train {

// The memory plan counts the votes' buffer without seeing this type.
static_assert(StepVotes::kSlots == plan::kStepVoteSlots, "plan::kStepVoteSlots must follow StepVotes::kSlots");

void StepVotes::encode(double* s) const {
  s[0] = loss.sum;
  s[1] = double(loss.tokens);
  s[2] = double(preempted_ranks);
  s[3] = double(busy_writers);
  s[4] = loss.router_aux;
  s[5] = loss.router_z;
  s[6] = double(loss.micro_batches);
}

StepVotes StepVotes::decode(const double* s) {
  StepVotes v;
  v.loss = model::LossSum{s[0], int64_t(s[1]), s[4], s[5], int64_t(s[6])};
  v.preempted_ranks = int(s[2]);
  v.busy_writers = int(s[3]);
  return v;
}

StepVotes all_reduce_votes(const StepVotes& mine, dist::Communicator& world, const Tensor& buffer) {
  FSDP_CHECK(buffer.dtype() == DType::F64 && buffer.numel() == StepVotes::kSlots && buffer.device().is_cpu(),
             "all_reduce_votes: buffer {} is not [{}] float64 on the host", buffer.str(), StepVotes::kSlots);
  double* slots = buffer.data<double>();
  mine.encode(slots);
  world.wait(world.all_reduce(buffer));
  return StepVotes::decode(slots);
}

}  // namespace fsdp::train
