// PEFT LoRA adapter folders in and out (what PeftModel.from_pretrained loads and
// model.save_pretrained writes):
//
//   adapter_config.json         peft_type "LORA", r, lora_alpha, lora_dropout, target_modules,
//                               use_rslora, base_model_name_or_path, bias "none", ...
//   adapter_model.safetensors   <module>.lora_A.weight [r, in] and .lora_B.weight [out, r] per
//                               adapted module, named as PEFT names them:
//                               base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
//
// Reading refuses by name every adapter feature we do not implement (DoRA, biases,
// modules_to_save, per-layer rank or alpha patterns, layer selection, fan_in_fan_out,
// initialisations that rewrite the base such as PiSSA or OLoRA, other PEFT types), so an
// adapter is never half-applied. The tensors themselves load through the importer
// (hf_import.h) by their PEFT names: a missing one, or one shaped for another base, is an
// error naming the tensor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/peft.h"

namespace fsdp::ckpt {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

struct PeftAdapterConfig {
  int64_t r = 0;
  double lora_alpha = 0, lora_dropout = 0;
  std::vector<std::string> target_modules;  // as written ("all-linear" stays one entry)
  bool use_rslora = false;
  std::string base_model_name_or_path;
};

// Reads and checks <dir>/adapter_config.json (errors name the file and the key).
PeftAdapterConfig read_peft_adapter_config(const std::string& dir);

// <dir>'s adapter_model.safetensors, opened; an error naming it (and an adapter_model.bin
// found instead) when it is not there.
std::unique_ptr<SafetensorsFolder> open_peft_adapter_weights(const std::string& dir);

// Errors (naming the key on both sides) unless the adapter is the one `lora` asks for on a
// model of shape `cfg`: the same r, alpha, rslora and set of target modules. The dropout may
// differ (it is a training choice, not part of the weights).
void check_peft_adapter_matches(const PeftAdapterConfig& adapter, const model::LoraSpec& lora,
                                const model::LlamaConfig& cfg, const std::string& dir);

struct PeftExportOptions {
  DType dtype = DType::F32;  // of the adapter tensors: float32 (exact) or bfloat16
  std::string base_model_name_or_path;
  bool overwrite = false;  // replace a non-empty out_dir (export --overwrite) once the new one is complete
};

// Writes a PEFT folder for the adapters of `units` (lora_units' layout): `full_unit(u)`
// returns unit u's whole trainable buffer (float32, CPU), called once per unit that has
// adapters. Crash-safe like write_hf_llama (a temporary folder renamed into place).
void write_peft_adapter(const std::string& out_dir, const model::LlamaConfig& cfg, const model::LoraSpec& lora,
                        const std::vector<model::UnitLayout>& units, const std::function<Tensor(int unit)>& full_unit,
                        const PeftExportOptions& opt = {});

}  // namespace fsdp::ckpt
