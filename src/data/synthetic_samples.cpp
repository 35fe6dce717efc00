#include "fsdp/data/synthetic_samples.h"

#include <cstring>
#include <limits>

namespace fsdp::data {

SyntheticSamples::SyntheticSamples(int64_t vocab_size, int64_t seq_len, uint64_t seed)
    : source_(vocab_size, seq_len, seed) {}

int64_t SyntheticSamples::num_samples() const { return std::numeric_limits<int64_t>::max() / 2; }

void SyntheticSamples::read_sample(int64_t index, int32_t* window) const {
  FSDP_CHECK(index >= 0 && index < num_samples(), "synthetic sample {} out of range", index);
  // fill() writes tensors; each reading thread keeps one pair of [seq_len] scratch tensors
  // (allocated on its first sample), so steady-state reads allocate nothing.
  const int64_t seq = source_.seq_len();
  thread_local Tensor ids, targets;
  if (!ids.defined() || ids.numel() != seq) {
    ids = Tensor::empty({seq}, DType::I32);
    targets = Tensor::empty({seq}, DType::I32);
  }
  source_.fill(index, 1, ids, targets);
  // window = ids then the last target: tokens [0, seq_len].
  std::memcpy(window, ids.data<int32_t>(), size_t(seq) * sizeof(int32_t));
  window[seq] = targets.data<int32_t>()[seq - 1];
}

}  // namespace fsdp::data
