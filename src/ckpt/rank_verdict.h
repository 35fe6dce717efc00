// Private to src/ckpt: how the ranks agree that a step of a checkpoint save or check
// worked, in one small all-reduce, so every rank throws (or goes on) together.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::ckpt::detail {

// Collective: the number of ranks that report `failed`; the same on every rank.
inline int count_failures(bool failed, dist::Communicator& world) {
  Tensor t = Tensor::zeros({1}, DType::F64);
  t.data<double>()[0] = failed ? 1.0 : 0.0;
  world.wait(world.all_reduce(t));
  return int(t.data<double>()[0]);
}

}  // namespace fsdp::ckpt::detail
