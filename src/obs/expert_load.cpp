// The step's expert load; see expert_load.h.
#include "fsdp/obs/expert_load.h"

#include <algorithm>

#include <fmt/format.h>

#include "fsdp/core/error.h"

namespace fsdp::obs {

std::string ImbalanceWatch::observe(int64_t step, const std::vector<double>& imbalance) {
  if (imbalance.empty() || warned_) return "";
  const auto worst = std::max_element(imbalance.begin(), imbalance.end());
  run_ = *worst >= threshold_ ? run_ + 1 : 0;
  if (run_ < patience_) return "";
  warned_ = true;
  return fmt::format("expert load: the router has collapsed: layer {}'s busiest expert took {:.2f}x the mean load at "
                     "step {}, and some layer stayed at or above {:.2f}x for the last {} steps (1 = balanced). The "
                     "load-balancing loss cannot see this when the router's probabilities are near uniform: set "
                     "model.router_bias_update_rate (auxiliary-loss-free balancing; the MoE demo uses 0.005), or see "
                     "docs/mixtral.md",
                     worst - imbalance.begin(), *worst, step, threshold_, run_);
}

ExpertLoad::ExpertLoad(int64_t layers, int64_t experts, bool drops)
    : layers_(layers), experts_(experts), drops_(drops),
      sums_(Tensor::zeros({layers * experts + (drops ? layers : 0)}, DType::F64)) {}

void ExpertLoad::begin_step() { sums_.zero_(); }

void ExpertLoad::add(const model::Llama& model, const model::LlamaActivations& act) {
  const auto records = model.router_records(act);
  FSDP_CHECK(int64_t(records.size()) == layers_, "expert load: {} layers recorded, expected {}", records.size(),
             layers_);
  double* s = sums_.data<double>();
  for (int64_t l = 0; l < layers_; ++l) {
    const model::RouterRecord* r = records[size_t(l)];
    FSDP_CHECK(r != nullptr && int64_t(r->count.size()) == experts_, "expert load: layer {} has no routing record",
               l);
    for (int64_t e = 0; e < experts_; ++e) s[l * experts_ + e] += double(r->count[size_t(e)]);
    if (drops_) s[layers_ * experts_ + l] += double(r->dropped);
  }
}

std::optional<int64_t> ExpertLoad::dropped() const {
  if (!drops_) return std::nullopt;
  const double* s = sums_.data<double>() + layers_ * experts_;
  int64_t n = 0;
  for (int64_t l = 0; l < layers_; ++l) n += int64_t(s[l]);
  return n;
}

void ExpertLoad::all_reduce(dist::Communicator& world) { world.wait(world.all_reduce(sums_)); }

std::vector<std::vector<int64_t>> ExpertLoad::counts() const {
  std::vector<std::vector<int64_t>> out(size_t(layers_), std::vector<int64_t>(size_t(experts_), 0));
  const double* s = sums_.data<double>();
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t e = 0; e < experts_; ++e) out[size_t(l)][size_t(e)] = int64_t(s[l * experts_ + e]);
  return out;
}

std::vector<double> ExpertLoad::imbalance() const {
  std::vector<double> out;
  const double* s = sums_.data<double>();
  for (int64_t l = 0; l < layers_; ++l) {
    const double* row = s + l * experts_;
    double total = 0;
    for (int64_t e = 0; e < experts_; ++e) total += row[e];
    const double mean = total / double(experts_);
    out.push_back(mean > 0 ? *std::max_element(row, row + experts_) / mean : 0.0);
  }
  return out;
}

}  // namespace fsdp::obs
