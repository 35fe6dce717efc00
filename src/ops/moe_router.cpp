// Front end of the MoE router: validates every argument once for all backends, then
// dispatches on the device. See moe_router.h for the math.
#include "fsdp/ops/moe_router.h"

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(moe_router_forward_stub);
FSDP_DEFINE_DISPATCH(moe_router_stats_stub);
FSDP_DEFINE_DISPATCH(moe_router_backward_stub);

namespace {

void check_stat(const Tensor& t, const Dims& shape, DType stat, const Tensor& logits, const char* what) {
  check_dtype(t, stat, what);
  check_shape(t, shape, what);
  check_contiguous(t, what);
  check_same_device(t, logits, what, "logits");
}

void check_routing(const Tensor& probs, const Tensor& lse, const Tensor& expert, const Tensor& weight) {
  check_dim(probs, 2, "probs");
  const int64_t n = probs.size(0), e = probs.size(1);
  FSDP_CHECK(probs.dtype() == DType::F32 || probs.dtype() == DType::F64, "moe router: probs must be float32 or "
             "float64, got {}", probs.str());
  check_contiguous(probs, "probs");
  check_stat(lse, Dims{n}, probs.dtype(), probs, "lse");
  check_dim(expert, 2, "expert");
  const int64_t k = expert.size(1);
  FSDP_CHECK(k >= 1 && k <= e, "moe router: k = {} experts per token must be in [1, {}]", k, e);
  check_dtype(expert, DType::I32, "expert");
  check_shape(expert, Dims{n, k}, "expert");
  check_contiguous(expert, "expert");
  check_same_device(expert, probs, "expert", "probs");
  if (weight.defined()) check_stat(weight, Dims{n, k}, probs.dtype(), probs, "weight");
}

}  // namespace

void moe_router_forward(const Tensor& logits, int64_t k, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                        const Tensor& weight, const Tensor& bias) {
  detail::check_float_rows(logits, "logits");
  const int64_t n = logits.size(0), e = logits.size(1);
  FSDP_CHECK(k >= 1 && k <= e, "moe_router_forward: k = {} must be in [1, {} experts]", k, e);
  check_stat(probs, Dims{n, e}, stat_dtype(logits.dtype()), logits, "probs");
  // expert's width first: check_routing takes k from it and would blame weight instead.
  check_dim(expert, 2, "expert");
  FSDP_CHECK(expert.size(1) == k, "moe_router_forward: expert is {}, expected k = {} columns", expert.str(), k);
  check_defined(weight, "weight");
  check_routing(probs, lse, expert, weight);
  // The routing bias is float32 whatever the compute dtype (training state kept in float32).
  if (bias.defined()) check_stat(bias, Dims{e}, DType::F32, logits, "bias");
  moe_router_forward_stub(logits.device(), logits, k, probs, lse, expert, weight, bias);
}

void moe_router_stats(const Tensor& probs, const Tensor& expert, const Tensor& lse, const Tensor& prob_sum,
                      const Tensor& count, const Tensor& lse_sq_sum) {
  check_routing(probs, lse, expert, Tensor());
  const int64_t e = probs.size(1);
  check_stat(prob_sum, Dims{e}, probs.dtype(), probs, "prob_sum");
  check_dtype(count, DType::I32, "count");
  check_shape(count, Dims{e}, "count");
  check_contiguous(count, "count");
  check_same_device(count, probs, "count", "probs");
  check_stat(lse_sq_sum, Dims{1}, probs.dtype(), probs, "lse_sq_sum");
  moe_router_stats_stub(probs.device(), probs, expert, lse, prob_sum, count, lse_sq_sum);
}

void moe_router_backward(const Tensor& dweight, const Tensor& probs, const Tensor& lse, const Tensor& expert,
                         const Tensor& weight, const Tensor& aux_grad, double z_scale, const Tensor& dlogits) {
  check_routing(probs, lse, expert, weight);
  check_defined(weight, "weight");
  if (dweight.defined()) check_stat(dweight, weight.sizes(), probs.dtype(), probs, "dweight");
  if (aux_grad.defined()) check_stat(aux_grad, Dims{probs.size(1)}, probs.dtype(), probs, "aux_grad");
  detail::check_float_rows(dlogits, "dlogits");
  check_shape(dlogits, probs.sizes(), "dlogits");
  check_same_device(dlogits, probs, "dlogits", "probs");
  FSDP_CHECK(stat_dtype(dlogits.dtype()) == probs.dtype(), "moe_router_backward: dlogits {} does not go with probs {}",
             dlogits.str(), probs.str());
  moe_router_backward_stub(probs.device(), dweight, probs, lse, expert, weight, aux_grad, z_scale, dlogits);
}

}  // namespace fsdp
