// The router losses of a mixture of experts, pooled over every layer of one micro-batch as
// transformers' load_balancing_loss_func pools the router logits of all layers (T = layers
// x tokens rows):
//
//   aux = E * sum_e f_e * P_e,  f_e = count_e / T (the k choices counted), P_e = mean_t p_te
//   z   = mean_t logsumexp(logits_t)^2                      (ST-MoE's router z-loss)
//
// and the model's objective adds router_aux_loss_coef * aux + router_z_loss_coef * z to the
// cross-entropy. f is a count, so only P carries a gradient: d aux / d p_te = E f_e / T, the
// same for every token and layer; d z / d lse_t^2 = 1 / T.
#pragma once

#include <vector>

#include "fsdp/model/llama_config.h"
#include "fsdp/model/mlp.h"

namespace fsdp::model {

struct RouterLosses {
  double aux = 0;  // load-balancing loss, unweighted (transformers' aux_loss)
  double z = 0;    // z-loss, unweighted
};

// The loss values of one micro-batch from its layers' records (reads the [E] sums back
// from the device: call it where the host waits anyway).
RouterLosses router_losses(const LlamaConfig& cfg, const std::vector<const RouterRecord*>& layers);

// Sets `out` to the gradient of scale * (aux_coef * aux + z_coef * z) that every layer's
// router backward adds (no wait: the counts are already on the host). out.aux_grad must be
// an [E] tensor of the stat dtype on the records' device.
void router_loss_grad(const LlamaConfig& cfg, const std::vector<const RouterRecord*>& layers, double scale,
                      RouterLossGrad& out);

}  // namespace fsdp::model
