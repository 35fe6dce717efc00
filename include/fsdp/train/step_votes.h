// What every rank tells every other once per step. The votes ride on the loss all-reduce
// (and on evaluation's), so agreeing costs no collective of its own, and since every rank
// sees the same sums, every rank stops, or commits a background checkpoint, at the same
// step:
//   loss              the sum of per-token losses and the number of tokens; for a mixture
//                     of experts also its router losses summed over micro-batches and ranks
//   preempted_ranks   ranks that received a preemption signal (train/preemption.h)
//   busy_writers      ranks whose background checkpoint write is still running
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/model/decoder.h"

namespace fsdp::train {

struct StepVotes {
  model::LossSum loss;
  int preempted_ranks = 0;
  int busy_writers = 0;

  // The float64 slots that travel in the all-reduce (sums of this layout are the layout of
  // the sums: counts are 0/1 per rank).
  static constexpr int64_t kSlots = 7;
  void encode(double* slots) const;
  static StepVotes decode(const double* slots);
};

// Collective over `world`: sums every rank's votes through `buffer` (a [kSlots] float64
// host tensor owned by the caller, so a step allocates nothing).
StepVotes all_reduce_votes(const StepVotes& mine, dist::Communicator& world, const Tensor& buffer);

}  // namespace fsdp::train
