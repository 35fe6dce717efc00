// Shard arithmetic as pure functions (llm.c's zero.cuh habit): how a unit's flat buffer
// of `numel` elements is padded and split among `n` ranks. Padding makes every shard
// the same size, which all-gather / reduce-scatter require; it is zero in parameters,
// gradients and optimizer state and never updated.
#pragma once

#include <cstdint>

namespace fsdp {

struct ShardRange {
  int64_t begin = 0;  // in the padded flat buffer
  int64_t size = 0;   // elements in every shard, padding included
  int64_t valid = 0;  // elements of this shard that are real parameters (< size on the last ranks)
};

// numel rounded up to a multiple of n (n >= 1); a unit with fewer elements than ranks
// still gives every rank a one-element shard.
inline int64_t padded_numel(int64_t numel, int n) {
  const int64_t per = numel <= 0 ? 1 : (numel + n - 1) / n;
  return per * n;
}

inline ShardRange shard_range(int64_t numel, int n, int rank) {
  ShardRange r;
  r.size = padded_numel(numel, n) / n;
  r.begin = r.size * rank;
  const int64_t end = r.begin + r.size < numel ? r.begin + r.size : numel;
  r.valid = end > r.begin ? end - r.begin : 0;
  return r;
}

}  // namespace fsdp
