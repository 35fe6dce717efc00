// A finished LoRA model, one unit at a time, for `export` and `generate`: its adapters and,
// merged (model/lora_merge.h), the plain units W + s B A that the plain model code runs and
// a Hugging Face folder holds. Two sources:
//   a LoRA checkpoint  its adapters (fp32 masters), and the base its manifest references
//                      (model.init_from, or the seeded initialiser), or `base` given
//                      instead (a moved folder); the base's bytes are fingerprinted as they
//                      are read and must be the checkpoint's (an error naming both)
//   PEFT               a Hugging Face base folder (plain or bitsandbytes 4-bit) and a PEFT
//                      adapter folder (refused by name where it uses what we do not implement)
// Only one unit's base and adapters are in memory at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/manifest.h"
#include "fsdp/config/config.h"
#include "fsdp/model/peft.h"
#include "fsdp/train/base_model.h"

namespace fsdp::train {

class LoraModel {
 public:
  // `checkpoint`: a verified checkpoint directory whose manifest has a base reference.
  static std::unique_ptr<LoraModel> from_checkpoint(const std::string& checkpoint, const std::string& base = "");
  static std::unique_ptr<LoraModel> from_peft(const std::string& base, const std::string& adapter);
  ~LoraModel();

  const model::LlamaConfig& config() const { return cfg_; }
  const model::LoraSpec& lora() const { return spec_.lora; }
  const std::vector<model::UnitLayout>& plain_units() const { return plain_; }
  const std::vector<model::UnitLayout>& lora_units() const { return lora_; }
  const std::string& base_path() const { return base_path_; }  // "" = the seeded base

  // Unit u's adapters (its trainable buffer; host float32).
  Tensor adapters(int u) const;
  // Unit u merged (host float32, plain layout). Units must be asked for in order when the
  // base is checked: after the last one the fingerprint is compared.
  Tensor merged(int u);

 private:
  LoraModel() = default;

  model::LlamaConfig cfg_;
  model::PeftSpec spec_;
  std::vector<model::UnitLayout> plain_, lora_;
  std::string base_path_;
  std::unique_ptr<BaseSource> base_;
  std::unique_ptr<ckpt::CheckpointReader> reader_;          // from a checkpoint
  std::unique_ptr<ckpt::SafetensorsFolder> adapter_folder_;  // from PEFT
  std::optional<ckpt::BaseReference> expected_base_;        // the checkpoint's base reference
  ckpt::BaseReference seen_;                                // what merged() has read so far
  std::string checkpoint_;
};

}  // namespace fsdp::train
