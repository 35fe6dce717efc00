// Temperature / top-k / top-p sampling; see include/fsdp/model/sampling.h.
// The filters follow transformers' TopKLogitsWarper and TopPLogitsWarper (4.47), so a
// setting means what it means there:
//   top-k keeps every token whose scaled logit is >= the k-th largest (ties at the boundary
//         are all kept, as torch.topk's threshold does);
//   top-p sorts what is left by probability, most likely first, and keeps token i when the
//         mass of the tokens before it is < top_p (HF: removes a token when the ascending
//         cumulative mass up to it is <= 1 - top_p), always at least the most likely one.
// Probabilities are computed in double from the float logits.
#include "fsdp/model/sampling.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fsdp/core/error.h"
#include "fsdp/core/random.h"

namespace fsdp::model {

namespace {

constexpr uint64_t kSamplingPurpose = 0x73616d706c696e67ULL;  // "sampling"

}  // namespace

void SamplingOptions::validate() const {
  FSDP_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0 (0 = greedy), got {}",
             temperature);
  FSDP_CHECK(top_k >= 0, "top_k must be >= 0 (0 = off), got {}", top_k);
  FSDP_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1] (1 = off), got {}", top_p);
}

std::string SamplingOptions::summary() const {
  if (temperature == 0) return "greedy";
  if (temperature < kGreedyBelow) return fmt::format("greedy (temperature {} is below {})", temperature, kGreedyBelow);
  return fmt::format("temperature {}, top_k {}, top_p {}, seed {}", temperature,
                     top_k == 0 ? std::string("off") : std::to_string(top_k),
                     top_p >= 1 ? std::string("off") : fmt::format("{}", top_p), seed);
}

int32_t argmax(std::span<const float> logits) {
  FSDP_CHECK(!logits.empty(), "argmax: empty row of logits");
  size_t best = 0, bad = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
    bad += !std::isfinite(logits[i]);
  }
  FSDP_CHECK(bad == 0, "sampling: {} of {} logits are not finite (NaN or inf): the model's output is broken", bad,
             logits.size());
  return int32_t(best);
}

Sampler::Sampler(const SamplingOptions& options, uint64_t stream)
    : opt_(options), key_(mix_key(options.seed, kSamplingPurpose, stream)) {
  opt_.validate();
}

void Sampler::candidates(std::span<const float> logits) {
  const int64_t V = int64_t(logits.size());
  FSDP_CHECK(V > 0, "sampling: empty row of logits");
  const double inv_t = 1.0 / opt_.temperature;
  const int32_t top = argmax(logits);  // also rejects NaN / inf
  const double m = double(logits[size_t(top)]) * inv_t;

  cand_.clear();
  // top-k: the threshold is the k-th largest logit (temperature > 0 keeps the order).
  float threshold = -INFINITY;
  if (opt_.top_k > 0 && opt_.top_k < V) {
    for (int64_t i = 0; i < V; ++i) cand_.push_back(Cand{int32_t(i), double(logits[size_t(i)])});
    std::nth_element(cand_.begin(), cand_.begin() + (opt_.top_k - 1), cand_.end(),
                     [](const Cand& a, const Cand& b) { return a.p > b.p; });
    threshold = float(cand_[size_t(opt_.top_k - 1)].p);
    cand_.clear();
  }
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) {
    const float l = logits[size_t(i)];
    if (!(l >= threshold)) continue;
    const double p = std::exp(double(l) * inv_t - m);
    cand_.push_back(Cand{int32_t(i), p});
    sum += p;
  }
  // Never draw from probabilities that are not numbers (a draw would fall through them all).
  // The arg max alone contributes exp(0) = 1 (up to a contracted multiply-add's rounding).
  FSDP_CHECK(std::isfinite(sum) && sum > 0.5, "sampling: the probabilities at temperature {} are not finite",
             opt_.temperature);
  for (Cand& c : cand_) c.p /= sum;

  if (opt_.top_p < 1) {
    std::sort(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); });
    double before = 0;
    size_t keep = 0;
    while (keep < cand_.size() && (keep == 0 || before < opt_.top_p)) before += cand_[keep++].p;
    cand_.resize(keep);
    for (Cand& c : cand_) c.p /= before;
  }
}

int32_t Sampler::sample(std::span<const float> logits, uint64_t index) {
  if (greedy()) return argmax(logits);
  candidates(logits);
  const double u = uniform01(key_, index);
  double c = 0;
  for (const Cand& k : cand_) {
    c += k.p;
    if (u < c) return k.id;
  }
  return cand_.back().id;  // u within round-off of 1
}

std::vector<double> Sampler::distribution(std::span<const float> logits) {
  std::vector<double> d(logits.size(), 0.0);
  if (greedy()) {
    d[size_t(argmax(logits))] = 1.0;
    return d;
  }
  candidates(logits);
  for (const Cand& k : cand_) d[size_t(k.id)] = k.p;
  return d;
}

}  // namespace fsdp::model
