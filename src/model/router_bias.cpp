// The routing biases of auxiliary-loss-free balancing and their update; see router_bias.h.
#include "fsdp/model/router_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "fsdp/core/error.h"

namespace fsdp::model {

void update_router_bias(std::span<float> bias, std::span<const int64_t> counts, double rate) {
  FSDP_CHECK(bias.size() == counts.size() && !bias.empty(), "update_router_bias: {} biases for {} counts",
             bias.size(), counts.size());
  FSDP_CHECK(std::isfinite(rate) && rate >= 0, "update_router_bias: rate must be finite and >= 0, got {}", rate);
  const int64_t experts = int64_t(counts.size());
  int64_t total = 0;
  for (const int64_t c : counts) total += c;
  // sign(mean - c_e) = sign(total - E c_e): in integers, so "exactly the mean" is exact.
  std::vector<double> delta(counts.size());
  double delta_sum = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t diff = total - experts * counts[e];
    delta[e] = rate * double((diff > 0) - (diff < 0));
    delta_sum += delta[e];
  }
  const double delta_mean = delta_sum / double(experts);
  for (size_t e = 0; e < bias.size(); ++e) bias[e] = float(double(bias[e]) + delta[e] - delta_mean);
}

RouterBias::RouterBias(int64_t layers, int64_t experts, Device device)
    : layers_(layers), experts_(experts), device_(device) {
  FSDP_CHECK(layers >= 1 && experts >= 1, "RouterBias: {} layers of {} experts", layers, experts);
}

void RouterBias::enable() {
  set(std::vector<std::vector<float>>(size_t(layers_), std::vector<float>(size_t(experts_), 0.0f)));
}

void RouterBias::set(const std::vector<std::vector<float>>& values) {
  if (values.empty()) {
    host_.clear();
    device_values_ = Tensor();
    return;
  }
  FSDP_CHECK(int64_t(values.size()) == layers_, "router biases for {} layers, but the model has {}", values.size(),
             layers_);
  for (size_t l = 0; l < values.size(); ++l) {
    FSDP_CHECK(int64_t(values[l].size()) == experts_, "router biases of layer {}: {} values, but the model has {} experts",
               l, values[l].size(), experts_);
    for (size_t e = 0; e < values[l].size(); ++e)
      FSDP_CHECK(std::isfinite(values[l][e]), "router bias of layer {} expert {} is {}, not a finite number", l, e,
                 values[l][e]);
  }
  host_ = values;
  upload();
}

Tensor RouterBias::layer(int64_t l) const {
  if (!enabled()) return Tensor();
  FSDP_CHECK(l >= 0 && l < layers_, "router bias: layer {} of {}", l, layers_);
  return device_values_.select(0, l);
}

void RouterBias::update(const std::vector<std::vector<int64_t>>& counts, double rate) {
  FSDP_CHECK(enabled(), "router bias: update before enable()");
  FSDP_CHECK(int64_t(counts.size()) == layers_, "router bias: counts of {} layers for {}", counts.size(), layers_);
  for (int64_t l = 0; l < layers_; ++l) update_router_bias(host_[size_t(l)], counts[size_t(l)], rate);
  upload();
}

float router_bias_max_abs(const std::vector<std::vector<float>>& values) {
  float m = 0;
  for (const auto& row : values)
    for (const float b : row) m = std::max(m, std::abs(b));
  return m;
}

// The routers read the device image; the host copy stays the one the update and the
// checkpoint use. On the CPU the image is written in place (the routers hold views of it).
void RouterBias::upload() {
  if (!device_values_.defined()) device_values_ = Tensor::empty({layers_, experts_}, DType::F32, device_);
  Tensor host = device_.is_cpu() ? device_values_ : Tensor::empty({layers_, experts_}, DType::F32);
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t e = 0; e < experts_; ++e) host.data<float>()[l * experts_ + e] = host_[size_t(l)][size_t(e)];
  if (!device_.is_cpu()) device_values_.copy_(host);
}

}  // namespace fsdp::model
