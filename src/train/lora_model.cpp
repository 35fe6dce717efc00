// A finished LoRA model from a checkpoint or from PEFT; see lora_model.h.
#include "fsdp/train/lora_model.h"

#include <algorithm>
#include <filesystem>

#include "fsdp/ckpt/hf_frozen.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/config/model_options.h"
#include "fsdp/model/lora_merge.h"

namespace fsdp::train {

std::unique_ptr<LoraModel> LoraModel::from_checkpoint(const std::string& checkpoint, const std::string& base) {
  std::unique_ptr<LoraModel> m(new LoraModel());
  m->checkpoint_ = checkpoint;
  m->reader_ = std::make_unique<ckpt::CheckpointReader>(checkpoint);
  const ckpt::Manifest& man = m->reader_->manifest();
  FSDP_CHECK(man.base.has_value(), "{} is not a LoRA checkpoint (its manifest references no base)", checkpoint);
  // The run's own config: its LoRA settings, seed and dtype made the layout and the base's bytes.
  config::Config cfg = config::load_config_string(man.config_yaml, checkpoint + "/manifest.json's config");
  cfg.model.init_from = base.empty() ? man.base->path : base;
  std::error_code ec;
  if (base.empty() && !man.base->path.empty() && !std::filesystem::is_directory(man.base->path, ec)) {
    FSDP_FAIL("{} holds adapters trained on the base {} (model.init_from, as its manifest records it), which is not "
              "there{}: pass --base DIR with the base folder (its bytes must be the ones trained on)",
              checkpoint, man.base->path,
              std::filesystem::path(man.base->path).is_relative()
                  ? " (a relative path, recorded from the training run's working directory)"
                  : "");
  }
  FSDP_CHECK(base.empty() || std::filesystem::is_directory(base, ec), "--base {}: no such directory", base);
  m->cfg_ = man.model;
  m->spec_ = config::peft_spec(cfg, m->cfg_);
  m->lora_ = model::lora_units(m->cfg_, m->spec_);
  m->plain_ = model::llama_units(m->cfg_);
  m->reader_->check_model(m->cfg_, m->lora_);
  m->base_path_ = cfg.model.init_from;
  m->base_ = std::make_unique<BaseSource>(cfg, m->cfg_);
  m->expected_base_ = man.base;
  m->seen_.path = cfg.model.init_from;
  m->seen_.quantization = cfg.model.quantization;
  return m;
}

std::unique_ptr<LoraModel> LoraModel::from_peft(const std::string& base, const std::string& adapter) {
  std::unique_ptr<LoraModel> m(new LoraModel());
  const ckpt::PeftAdapterConfig a = ckpt::read_peft_adapter_config(adapter);
  m->cfg_ = ckpt::read_hf_llama_config(base);
  config::Config cfg;
  cfg.model.init_from = base;
  cfg.model.quantization = ckpt::is_bnb_4bit_folder(base) ? "nf4" : "none";
  cfg.lora.enabled = true;
  cfg.lora.rank = int(a.r);
  cfg.lora.alpha = a.lora_alpha;
  cfg.lora.dropout = a.lora_dropout;
  cfg.lora.rslora = a.use_rslora;
  // PEFT writes module names or full module paths; the layout takes names (and the check
  // below refuses an adapter that covers only some layers).
  cfg.lora.targets.clear();
  for (const std::string& t : a.target_modules) {
    const std::string name = t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
    if (std::find(cfg.lora.targets.begin(), cfg.lora.targets.end(), name) == cfg.lora.targets.end())
      cfg.lora.targets.push_back(name);
  }
  m->spec_ = config::peft_spec(cfg, m->cfg_);
  ckpt::check_peft_adapter_matches(a, m->spec_.lora, m->cfg_, adapter);
  m->lora_ = model::lora_units(m->cfg_, m->spec_);
  m->plain_ = model::llama_units(m->cfg_);
  m->base_path_ = base;
  m->base_ = std::make_unique<BaseSource>(cfg, m->cfg_);
  m->adapter_folder_ = ckpt::open_peft_adapter_weights(adapter);
  return m;
}

LoraModel::~LoraModel() = default;

Tensor LoraModel::adapters(int u) const {
  const model::UnitLayout& unit = lora_[size_t(u)];
  Tensor flat = Tensor::zeros({unit.numel}, DType::F32);
  if (unit.numel == 0) return flat;
  // By the layout: a tensor-parallel run's checkpoint stores slices, read into one rank's unit.
  if (reader_) reader_->read(unit, u, "master", 0, flat);
  else ckpt::load_hf_unit(*adapter_folder_, unit, flat);
  return flat;
}

Tensor LoraModel::merged(int u) {
  const model::UnitLayout& unit = lora_[size_t(u)];
  Tensor frozen = Tensor::empty({unit.frozen_bytes}, DType::U8);
  base_->fill(unit, u, frozen, 0);
  seen_.crc32 = ckpt::crc32_concat(seen_.crc32, ckpt::crc32_parallel(frozen.data_ptr(), frozen.nbytes()),
                                   frozen.nbytes());
  seen_.bytes += frozen.nbytes();
  Tensor out = Tensor::empty({plain_[size_t(u)].numel}, DType::F32);
  model::merge_lora_unit(unit, frozen, adapters(u), plain_[size_t(u)], out);
  if (expected_base_ && u + 1 == int(lora_.size())) check_same_base(*expected_base_, seen_, checkpoint_);
  return out;
}

}  // namespace fsdp::train
