// Which MLP a block gets: the one place a new MLP kind (a sparse mixture of experts) is
// chosen from the config, for the sublayer and for the structs its forward and backward use.
#include "fsdp/model/mlp.h"

#include "fsdp/core/error.h"
#include "fsdp/model/mlp_dense.h"
#include "fsdp/model/mlp_moe.h"

namespace fsdp::model {

std::unique_ptr<MlpSublayer> make_mlp(const LlamaConfig& cfg, const UnitLayout& block, const SequenceParallel* sp,
                                      RouterBiasRef bias, const ExpertDispatch* ep, const UnitLayout* experts) {
  if (cfg.is_moe()) return std::make_unique<MoeMlp>(cfg, block, sp, std::move(bias), ep, experts);
  return std::make_unique<DenseSwiGLU>(cfg, block, sp);
}

std::unique_ptr<MlpSaved> new_mlp_saved(const LlamaConfig& cfg) {
  if (cfg.is_moe()) return std::make_unique<MoeMlpSaved>();
  return std::make_unique<DenseMlpSaved>();
}

std::unique_ptr<MlpGrads> new_mlp_grads(const LlamaConfig& cfg) {
  if (cfg.is_moe()) return std::make_unique<MoeMlpGrads>();
  return std::make_unique<DenseMlpGrads>();
}

std::unique_ptr<MlpSaved> MlpSublayer::make_saved(int64_t rows, DType dtype, Device device) const {
  std::unique_ptr<MlpSaved> s = new_mlp_saved(cfg_);
  s->bind(cfg_, rows, dtype, allocate_on(device));
  return s;
}

std::unique_ptr<MlpGrads> MlpSublayer::make_grads(int64_t rows, DType dtype, Device device) const {
  std::unique_ptr<MlpGrads> g = new_mlp_grads(cfg_);
  g->bind(cfg_, rows, dtype, allocate_on(device));
  return g;
}

}  // namespace fsdp::model
