// Auxiliary-loss-free load balancing (DeepSeek-V3, arXiv:2412.19437 section 2.1.2;
// torchtitan's MoE load_balance_coeff): every MoE layer keeps a bias b [E] that is added
// to the router's probabilities only to choose each token's top-k experts (the combine
// weights stay the unbiased probabilities: fsdp/ops/moe_router.h), and after every
// optimizer step
//
//   d_e = rate * sign(mean_e' c_e' - c_e)      c_e = the (token, choice) pairs expert e got
//   b_e += d_e - mean_e' d_e'                  over the whole step, every micro-batch and rank
//
// An expert that got more than its share is made less attractive, one that got less more,
// by a fixed step, whatever the loss says: unlike the Switch loss it does not depend on the
// router's probabilities being spread, which is why it balances a router the aux loss is
// blind to (docs/mixtral.md, "Is the routing healthy?").
//
// The update is centred (the mean of d subtracted), as torchtitan does: adding one constant
// to every expert's score changes no top-k choice, so centring changes no routing, but it
// keeps sum_e b_e = 0, so the biases cannot drift together and |b| reads as how far each
// expert is pushed from neutral (what `export` reports).
//
// The biases are training state, not parameters: no gradient, no optimizer, no clipping.
// They come from the step's global counts (the counts the metrics all-reduce), computed on
// the host in a fixed order, so every rank holds the same bits and any world size trains
// the same run. Checkpoints keep them in the manifest (ckpt/manifest.h's TrainState).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fsdp/core/device.h"
#include "fsdp/core/tensor.h"

namespace fsdp::model {

// One layer's update, in place: bias[e] += d_e - mean(d) as above (in double, rounded once
// to float32), from that layer's counts. rate >= 0; counts.size() == bias.size().
void update_router_bias(std::span<float> bias, std::span<const int64_t> counts, double rate);

// The largest |b| over every layer and expert of `values` ([layers][experts]; 0 when empty).
float router_bias_max_abs(const std::vector<std::vector<float>>& values);

// Every MoE layer's biases: an authoritative host copy and its image on the model's device
// ([layers, experts] float32), which the routers read. Off until enable() or set(): then
// layer() is undefined and routing is the plain top-k.
class RouterBias {
 public:
  RouterBias(int64_t layers, int64_t experts, Device device);

  bool enabled() const { return !host_.empty(); }
  int64_t layers() const { return layers_; }
  int64_t experts() const { return experts_; }

  // Every bias 0 (a fresh run that balances).
  void enable();
  // Takes these values ([layers][experts], finite); empty = off. A shape that is not the
  // model's is an error naming both.
  void set(const std::vector<std::vector<float>>& values);
  // The values ([layers][experts]); empty when off.
  const std::vector<std::vector<float>>& values() const { return host_; }
  // Layer l's biases on the device ([E] float32), or an undefined tensor when off.
  Tensor layer(int64_t l) const;
  // One step's update of every layer from counts[layer][expert] (needs enabled()).
  void update(const std::vector<std::vector<int64_t>>& counts, double rate);

 private:
  void upload();

  int64_t layers_, experts_;
  Device device_;
  std::vector<std::vector<float>> host_;
  Tensor device_values_;  // [layers, experts] float32 on device_, undefined when off
};

// What one MoE layer holds to read its row of a model's RouterBias at every forward (the
// biases change between steps; the layer's view of them never does). A null table = none.
struct RouterBiasRef {
  std::shared_ptr<const RouterBias> table;
  int64_t layer = 0;
  Tensor get() const { return table ? table->layer(layer) : Tensor(); }
};

}  // namespace fsdp::model
