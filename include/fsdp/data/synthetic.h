// A seeded synthetic token source with structure a model can learn, for smoke tests,
// demos without a corpus and benchmarks. Tokens follow a fixed random Markov chain: each
// token has kSuccessors likely successors with probabilities kSuccessorProbs, so the
// best achievable loss is the chain's entropy rate (~1.21 nats) while an untrained model
// starts near ln(vocab). Sample i (one window of seq_len + 1 tokens) is a pure function
// of (seed, i): the global sample order never depends on how many ranks read it.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"

namespace fsdp::data {

class SyntheticSource {
 public:
  static constexpr int kSuccessors = 4;
  static constexpr double kSuccessorProbs[kSuccessors] = {0.5, 0.25, 0.15, 0.10};

  SyntheticSource(int64_t vocab_size, int64_t seq_len, uint64_t seed);

  // Writes samples [first, first + count) into ids and targets (int32, [count * seq_len],
  // CPU): ids are tokens 0..seq_len-1 of each window, targets tokens 1..seq_len.
  void fill(int64_t first_sample, int64_t count, const Tensor& ids, const Tensor& targets) const;

  // Entropy rate of the chain in nats per token: the loss floor.
  static double entropy_rate();
  int64_t vocab_size() const { return vocab_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  int32_t successor(int32_t token, int j) const;

  int64_t vocab_, seq_len_;
  uint64_t seed_;
};

}  // namespace fsdp::data
