// Choosing the next token from a row of logits, as Hugging Face's generate does it with
// do_sample: the logits are divided by the temperature, then cut to the top_k largest, then
// to the nucleus (the fewest most-probable tokens whose probability reaches top_p), and the
// token is drawn from the softmax of what is left. Temperature 0 is greedy: the arg max
// (the lowest id among equal maxima, as torch.argmax); so is any temperature below
// kGreedyBelow, where the softmax is one-hot in double precision for any logit gap that
// float32 logits can show. Below it, logit / temperature is so large that the rounding of
// a contracted multiply-add in exp(l / t - max / t) is itself huge (about 1e15 at t = 1e-30):
// exp overflowed, the probabilities became inf / inf = NaN, and every draw fell through to
// the last vocabulary piece.
//
// The draw for generated token number i (0, 1, ...) is uniform01(key, i) from the project's
// counter-based generator (core/random.h) with key = mix_key(seed, purpose, stream): the same
// seed gives the same text, and a draw depends on nothing but (seed, stream, i).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fsdp::model {

inline constexpr double kGreedyBelow = 1e-6;

struct SamplingOptions {
  double temperature = 0.8;  // 0 (or below kGreedyBelow): greedy; otherwise > 0
  int64_t top_k = 0;         // 0: off; otherwise keep the k most likely tokens
  double top_p = 1.0;        // 1: off; otherwise in (0, 1]: keep the nucleus of mass top_p
  uint64_t seed = 0;

  // Throws fsdp::Error naming the field (and value) that is out of range.
  void validate() const;
  std::string summary() const;  // "temperature 0.8, top_k 40, top_p 0.95, seed 7" / "greedy"
};

class Sampler {
 public:
  // `stream` separates the draws of several sequences sampled with one seed (batch row b).
  explicit Sampler(const SamplingOptions& options, uint64_t stream = 0);

  const SamplingOptions& options() const { return opt_; }
  bool greedy() const { return opt_.temperature < kGreedyBelow; }

  // The token chosen from `logits` (one row, float32) as generated token number `index`.
  // Allocates nothing once it has seen a row of this length.
  int32_t sample(std::span<const float> logits, uint64_t index);

  // The probabilities sample() draws from for this row: zero outside the top-k / nucleus,
  // summing to 1 (greedy: 1 at the arg max). For tests and for reporting.
  std::vector<double> distribution(std::span<const float> logits);

 private:
  // Fills cand_ with the candidates (id, probability), most probable first, renormalised.
  void candidates(std::span<const float> logits);

  SamplingOptions opt_;
  uint64_t key_;
  struct Cand {
    int32_t id;
    double p;
  };
  std::vector<Cand> cand_;
};

// Index of the largest value; the lowest index among equal maxima.
int32_t argmax(std::span<const float> logits);

}  // namespace fsdp::model
