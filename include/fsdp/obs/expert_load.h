// How a mixture of experts spreads its tokens: per layer, the (token, choice) pairs each
// expert received during a step, summed over the step's micro-batches and every rank, and
// the layer's imbalance max/mean (1 = perfectly balanced, E/k = every token on the same k
// experts). What MoE users watch to see routing collapse; in metrics.jsonl as
// expert_load (layers x experts) and expert_imbalance (per layer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/model/decoder.h"

namespace fsdp::obs {

// A mixture of experts whose routing has collapsed trains on with a healthy-looking loss:
// this watch says so once, when the worst layer's max/mean load stayed at or above
// `threshold` for `patience` consecutive steps (1 = balanced, E/k = collapsed). Rank 0's.
class ImbalanceWatch {
 public:
  ImbalanceWatch(double threshold, int64_t patience) : threshold_(threshold), patience_(patience) {}
  // The warning to log after a step with these per-layer imbalances, or "" (at most once).
  std::string observe(int64_t step, const std::vector<double>& imbalance);

 private:
  double threshold_;
  int64_t patience_;
  int64_t run_ = 0;
  bool warned_ = false;
};

class ExpertLoad {
 public:
  // `drops`: the run has an expert capacity (moe.capacity_factor), whose dropped pairs are
  // counted beside the load (per layer; nothing is added to the all-reduce otherwise).
  ExpertLoad(int64_t layers, int64_t experts, bool drops = false);

  void begin_step();
  // Adds the counts the last forward over `act` left (host values: no wait).
  void add(const model::Llama& model, const model::LlamaActivations& act);
  // Collective over `world`: sums every rank's counts (one small host all-reduce).
  void all_reduce(dist::Communicator& world);

  // counts()[layer][expert] after all_reduce.
  std::vector<std::vector<int64_t>> counts() const;
  std::vector<double> imbalance() const;  // max / mean per layer
  // The pairs dropped over capacity after all_reduce, summed over layers; nullopt without `drops`.
  std::optional<int64_t> dropped() const;

 private:
  int64_t layers_, experts_;
  bool drops_;
  Tensor sums_;  // [layers * experts (+ layers dropped)] float64 on the host (exact below 2^53)
};

}  // namespace fsdp::obs
