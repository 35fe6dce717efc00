// What the multi-rank training tests share (tests/mpi on the CPU, tests/cuda_mpi on CUDA):
// a scratch directory every rank sees, and the norm-wise distance their parameter
// comparisons state their tolerances in.
#pragma once

#include <cmath>
#include <filesystem>
#include <string>

#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::test {

// <tmp>/<name>, emptied by rank 0 of `world` before any rank uses it (a collective).
inline std::string shared_scratch(dist::Communicator& world, const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() / name).string();
  if (world.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  world.barrier();
  return dir;
}

// ||a - b|| / ||b|| over every element (host tensors of one numel).
inline double rel_norm_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double d = a.get_flat(i) - b.get_flat(i);
    num += d * d;
    den += b.get_flat(i) * b.get_flat(i);
  }
  return std::sqrt(num / den);
}

}  // namespace fsdp::test
