// A LoRA run's two halves from the config (model/peft.h): the frozen base and the
// adapters, each rank filling only its shards.
//
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

// `shard` and `tensor` are the engine's shard group and the tensor group on the host (MPI,
// or one rank). The fingerprint is one process's at any layout: under tensor parallelism
// the ranks checksum one rank's layout of the base, 1 / (shard x tensor) of it each.
ckpt::BaseReference base_reference(const config::Config& cfg, const model::Llama& model, const FsdpEngine& engine,
                                   dist::Communicator& shard, dist::Communicator& tensor);

// model.init_from as a checkpoint records it: absolute ("" for the seeded base).
std::string absolute_base_path(const std::string& init_from);

// Errors (naming both) unless `saved` (a checkpoint's) and `loaded` (this run's) are the same
// base; `checkpoint` names the checkpoint.
void check_same_base(const ckpt::BaseReference& saved, const ckpt::BaseReference& loaded,
                     const std::string& checkpoint);

}  // namespace fsdp::train
