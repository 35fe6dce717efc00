// The config as the model and the FSDP engine take it: the model's shape (model.preset, or
// model.init_from's config.json, with the config's explicit shape keys on top), for a LoRA
// run the adapters and the frozen base's storage (lora.*, model.quantization), the
// activation checkpointing policy and the engine's options. Every contradiction is a
// ConfigError naming the key (exit 2), found before any work. Used by the run (train/) and
// by the memory plan (plan/), which must agree on all of it.
#pragma once

#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/core/device.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/activations.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/peft.h"

namespace fsdp::config {

// The model shape a config asks for: the preset, or config.json of model.init_from, with
// the config's explicit shape keys applied on top (an override that contradicts an
// init_from folder is an error naming the key).
model::LlamaConfig resolve_model_config(const ModelConfig& m);
// resolve_model_config, and train.seq_len within the model's context.
model::LlamaConfig training_model_config(const Config& cfg);
// Warns when model.preset was set but model.init_from's config.json decides the shape `m`
// (training_model_config's result). Separate, so a run that resolves its model several
// times (start-up, memory check, trainer) says it once.
void warn_if_preset_unused(const Config& cfg, const model::LlamaConfig& m);

// lora.* and model.quantization as the model takes them; the NF4 weights' dtype is that of
// model.init_from's block matrices (float32 for a seeded base). A target naming no module,
// a rank outside a layer's width or an NF4 weight that is not a multiple of 64 is a
// ConfigError naming the key.
model::PeftSpec peft_spec(const Config& cfg, const model::LlamaConfig& model_cfg);
// The same from the keys alone (no model folder read, no layout checked): the memory
// plan's, where NF4 values' dtype before quantization changes no size.
model::PeftSpec peft_keys(const Config& cfg);
// model::lora_units, its errors (a target naming no module, a rank above a layer's width,
// an NF4 weight off the block size) thrown as config errors (exit 2).
std::vector<model::UnitLayout> checked_lora_units(const model::LlamaConfig& model_cfg, const model::PeftSpec& p);

// The shard group's size on `world_size` ranks with `ranks_per_node` per node: the
// data-parallel ranks (world / parallel.tensor) for FULL_SHARD and SHARD_GRAD_OP, 1 for
// NO_SHARD, fsdp.shard_group_size for HYBRID_SHARD(_ZERO2) (0: one node's data-parallel ranks). A
// parallel.tensor that does not divide the world or a node's ranks, or a group that does not
// divide the data-parallel ranks, is a ConfigError naming the key (exit 2, on every rank
// count). The one layout validation: `train` runs it at start-up once the world's size is
// known (train::check_mesh, which adds what only the node map shows), and `plan` on --ranks.
int checked_shard_group(const Config& cfg, int world_size, int ranks_per_node);

// train.activation_checkpointing, _every and activation_offload as the model's policy.
model::ActivationCheckpointing activation_checkpointing(const TrainConfig& t);
// fsdp.* as engine options for a model computing in train.dtype on `device`.
FsdpOptions fsdp_options(const Config& cfg, Device device = Device::cpu());

}  // namespace fsdp::config
