// Which MLP a block gets: the one place a new MLP kind (a sparse mixture of experts) is
// chosen from the config.
#include "fsdp/model/mlp.h"

#include "fsdp/model/mlp_dense.h"
#include "fsdp/model/mlp_moe.h"

namespace fsdp::model {

std::unique_ptr<MlpSublayer> make_mlp(const LlamaConfig& cfg, const UnitLayout& block) {
  if (cfg.is_moe()) return std::make_unique<MoeMlp>(cfg, block);
  return std::make_unique<DenseSwiGLU>(cfg, block);
}

}  // namespace fsdp::model
