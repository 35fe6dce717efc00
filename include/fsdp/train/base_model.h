// A LoRA run's two halves from the config (model/peft.h): the frozen base and the
// adapters, each rank filling only its shards.
//
//   peft_spec          lora.* and model.quantization as the model takes them; the NF4
//                      weights' dtype is that of model.init_from's block matrices (float32
//                      for a seeded base). A target naming no module, a rank outside a
//                      layer's width or an NF4 weight that is not a multiple of 64 is a
//                      ConfigError naming the key (exit 2), found before any work.
//   init_frozen_base   the base from model.init_from (a plain Hugging Face folder, NF4
//                      quantized shard by shard as it loads; or a bitsandbytes 4-bit folder,
//                      its pieces as stored), or from the seeded initialiser: the very base a
//                      full fine-tune with train.seed starts from
//   init_adapters      lora.init_from (a PEFT folder, checked against lora.*), or PEFT's
//                      initialisation (A Kaiming-uniform, B zeros) from train.seed
//   base_reference     collective: what the checkpoint records instead of the base, with a
//                      CRC-32 of every frozen byte, the same on any number of ranks
#pragma once

#include <memory>
#include <vector>

#include "fsdp/ckpt/manifest.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/peft.h"

namespace fsdp::train {

model::PeftSpec peft_spec(const config::Config& cfg, const model::LlamaConfig& model_cfg);
// The same from the keys alone (no model folder read, no layout checked): the memory
// plan's, where NF4 values' dtype before quantization changes no size.
model::PeftSpec peft_keys(const config::Config& cfg);
// model::lora_units, its errors (a target naming no module, a rank above a layer's width,
// an NF4 weight off the block size) thrown as config errors (exit 2).
std::vector<model::UnitLayout> checked_lora_units(const model::LlamaConfig& model_cfg, const model::PeftSpec& p);

// The frozen base the config names, as the bytes of any range of a unit's frozen buffer:
// model.init_from's folder (plain or bitsandbytes), or the seeded initialiser.
class BaseSource {
 public:
  BaseSource(const config::Config& cfg, const model::LlamaConfig& model_cfg);
  ~BaseSource();
  // Bytes [begin, begin + host.numel()) of unit u's frozen buffer (`unit`: lora_units' layout).
  void fill(const model::UnitLayout& unit, int u, const Tensor& host, int64_t begin);

 private:
  std::unique_ptr<ckpt::SafetensorsFolder> folder_;
  std::vector<model::UnitLayout> plain_;
  uint64_t seed_ = 0;
  double init_std_ = 0;
};

void init_frozen_base(const config::Config& cfg, const model::Llama& model, FsdpEngine& engine);
void init_adapters(const config::Config& cfg, const model::Llama& model, FsdpEngine& engine);

// `shard` is the engine's shard group on the host (MPI, or one rank).
ckpt::BaseReference base_reference(const config::Config& cfg, const FsdpEngine& engine, dist::Communicator& shard);

// Errors (naming both) unless `saved` (a checkpoint's) and `loaded` (this run's) are the same
// base; `checkpoint` names the checkpoint.
void check_same_base(const ckpt::BaseReference& saved, const ckpt::BaseReference& loaded,
                     const std::string& checkpoint);

}  // namespace fsdp::train
