// The synthetic Markov source (synthetic.h) as a SampleSource, so the Loader serves it
// like a token corpus: sample i is SyntheticSource's window i, a pure function of
// (seed, i). The source is unbounded; num_samples() is INT64_MAX / 2, so positions never
// wrap into a second epoch in practice and the loader must run with shuffle off (the
// samples are independent draws already; a permutation of that many cannot be held).
#pragma once

#include <cstdint>

#include "fsdp/data/loader.h"
#include "fsdp/data/synthetic.h"

namespace fsdp::data {

class SyntheticSamples final : public SampleSource {
 public:
  SyntheticSamples(int64_t vocab_size, int64_t seq_len, uint64_t seed);

  int64_t num_samples() const override;
  int64_t seq_len() const override { return source_.seq_len(); }
  void read_sample(int64_t index, int32_t* window) const override;
  const SyntheticSource& source() const { return source_; }

 private:
  SyntheticSource source_;
};

}  // namespace fsdp::data
