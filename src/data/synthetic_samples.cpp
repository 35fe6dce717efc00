#include "fsdp/data/synthetic_samples.h"

#include <limits>

namespace fsdp::data {

SyntheticSamples::SyntheticSamples(int64_t vocab_size, int64_t seq_len, uint64_t seed)
    : source_(vocab_size, seq_len, seed) {}

int64_t SyntheticSamples::num_samples() const { return std::numeric_limits<int64_t>::max() / 2; }

void SyntheticSamples::read_sample(int64_t index, int32_t* window) const {
  FSDP_CHECK(index >= 0 && index < num_samples(), "synthetic sample {} out of range", index);
  // ids are tokens [0, seq_len) and targets tokens [1, seq_len]: both views of the one
  // window, where fill() writes each shared token twice with the same value. (Wrapping
  // the caller's memory allocates two small control blocks on the heap, not through the
  // tensor allocators.)
  const int64_t seq = source_.seq_len();
  source_.fill(index, 1, Tensor::from_blob(window, {seq}, DType::I32), Tensor::from_blob(window + 1, {seq}, DType::I32));
}

}  // namespace fsdp::data
