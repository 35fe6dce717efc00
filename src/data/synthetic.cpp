#include "fsdp/data/synthetic.h"

#include <cmath>

#include "fsdp/core/random.h"

namespace fsdp::data {

SyntheticSource::SyntheticSource(int64_t vocab_size, int64_t seq_len, uint64_t seed)
    : vocab_(vocab_size), seq_len_(seq_len), seed_(seed) {
  FSDP_CHECK(vocab_size >= 2, "synthetic data needs a vocabulary of at least 2 tokens, got {}", vocab_size);
  FSDP_CHECK(seq_len >= 1, "synthetic data needs seq_len >= 1, got {}", seq_len);
}

int32_t SyntheticSource::successor(int32_t token, int j) const {
  return int32_t(splitmix64(mix_key(seed_, 0x5eedu, uint64_t(token) * kSuccessors + uint64_t(j))) % uint64_t(vocab_));
}

void SyntheticSource::fill(int64_t first, int64_t count, const Tensor& ids, const Tensor& targets) const {
  check_dtype(ids, DType::I32, "ids");
  check_dtype(targets, DType::I32, "targets");
  check_contiguous(ids, "ids");
  check_contiguous(targets, "targets");
  FSDP_CHECK(ids.numel() == count * seq_len_ && targets.numel() == count * seq_len_,
             "ids {} / targets {} must hold {} samples of {} tokens", ids.str(), targets.str(), count, seq_len_);
  int32_t* in = ids.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t s = 0; s < count; ++s) {
    Rng rng(mix_key(seed_, 0xda7au, uint64_t(first + s)));
    int32_t tok = int32_t(rng.below(uint64_t(vocab_)));
    for (int64_t t = 0; t <= seq_len_; ++t) {
      if (t < seq_len_) in[s * seq_len_ + t] = tok;
      if (t > 0) tg[s * seq_len_ + t - 1] = tok;
      const double u = rng.uniform();
      double acc = 0;
      int j = 0;
      while (j < kSuccessors - 1 && u >= acc + kSuccessorProbs[j]) acc += kSuccessorProbs[j++];
      tok = successor(tok, j);
    }
  }
}

double SyntheticSource::entropy_rate() {
  double h = 0;
  for (double p : kSuccessorProbs) h -= p * std::log(p);
  return h;
}

}  // namespace fsdp::data
