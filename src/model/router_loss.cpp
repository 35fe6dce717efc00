// The pooled router losses and their gradient; see router_loss.h for the math.
#include "fsdp/model/router_loss.h"

#include "fsdp/core/error.h"

namespace fsdp::model {

namespace {

struct Pooled {
  std::vector<double> count;  // [E] over all layers
  double rows = 0;            // T = layers x tokens
};

Pooled pool_counts(const LlamaConfig& cfg, const std::vector<const RouterRecord*>& layers) {
  FSDP_CHECK(!layers.empty(), "router losses over no layers");
  Pooled p;
  p.count.assign(size_t(cfg.num_experts), 0.0);
  for (const RouterRecord* r : layers) {
    FSDP_CHECK(r != nullptr && int64_t(r->count.size()) == cfg.num_experts,
               "router losses: a layer without routing statistics for {} experts", cfg.num_experts);
    for (size_t e = 0; e < p.count.size(); ++e) p.count[e] += double(r->count[e]);
    p.rows += double(r->tokens);
  }
  FSDP_CHECK(p.rows > 0, "router losses over no tokens");
  return p;
}

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

}  // namespace

RouterLosses router_losses(const LlamaConfig& cfg, const std::vector<const RouterRecord*>& layers) {
  const Pooled p = pool_counts(cfg, layers);
  const int64_t L = int64_t(layers.size()), E = cfg.num_experts;
  // Every layer's [E] sums and its sum of lse^2 side by side, read back in one copy.
  const Tensor& first = layers[0]->prob_sum;
  Tensor stats = Tensor::empty({L, E + 1}, first.dtype(), first.device());
  for (int64_t l = 0; l < L; ++l) {
    stats.select(0, l).narrow(0, 0, E).copy_(layers[size_t(l)]->prob_sum);
    stats.select(0, l).narrow(0, E, 1).copy_(layers[size_t(l)]->lse_sq_sum);
  }
  const Tensor host = on_host(stats);
  std::vector<double> prob(size_t(E), 0.0);
  double lse_sq = 0;
  // Summed in layer order, in double: the same bits on every backend given the same sums.
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t e = 0; e < E; ++e) prob[size_t(e)] += host.get_flat(l * (E + 1) + e);
    lse_sq += host.get_flat(l * (E + 1) + E);
  }
  RouterLosses out;
  for (size_t e = 0; e < prob.size(); ++e) out.aux += (p.count[e] / p.rows) * (prob[e] / p.rows);
  out.aux *= double(E);
  out.z = lse_sq / p.rows;
  return out;
}

void router_loss_grad(const LlamaConfig& cfg, const std::vector<const RouterRecord*>& layers, double scale,
                      RouterLossGrad& out) {
  const Pooled p = pool_counts(cfg, layers);
  out.z_scale = scale * cfg.router_z_loss_coef / p.rows;
  FSDP_CHECK(out.aux_grad.defined() && out.aux_grad.numel() == cfg.num_experts,
             "router_loss_grad: aux_grad must hold {} values", cfg.num_experts);
  Tensor host = Tensor::empty({cfg.num_experts}, out.aux_grad.dtype(), Device::cpu());
  const double per_count = scale * cfg.router_aux_loss_coef * double(cfg.num_experts) / (p.rows * p.rows);
  for (int64_t e = 0; e < cfg.num_experts; ++e) host.set_flat(e, per_count * p.count[size_t(e)]);
  out.aux_grad.copy_(host);
}

}  // namespace fsdp::model
