// Lane-wise accumulation shared by the CPU row kernels: a reduction keeps kLanes
// independent double accumulators (so the compiler vectorises the loop) and combines them
// with a fixed pairwise tree, so the result depends only on the data, never on the
// thread count or on how the compiler schedules the loop.
#pragma once

namespace fsdp::cpu {

constexpr int kLanes = 16;

inline double combine_lanes(const double (&acc)[kLanes]) {
  double s[kLanes / 2];
  for (int l = 0; l < kLanes / 2; ++l) s[l] = acc[l] + acc[l + kLanes / 2];
  for (int w = kLanes / 4; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) s[l] += s[l + w];
  return s[0];
}

}  // namespace fsdp::cpu
