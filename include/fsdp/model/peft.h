// Parameter-efficient fine-tuning: LoRA adapters on a frozen base, which may be NF4-
// quantized (QLoRA), as PEFT and bitsandbytes define them.
//
//   y = W x + s * B A dropout(x),   s = alpha / r  (alpha / sqrt(r) with rslora)
//
// A [r, in] and B [out, r] are trainable; W is frozen. As PEFT initialises them: A
// Kaiming-uniform with a = sqrt(5) (uniform in +-1/sqrt(in)), B zeros, so training starts
// exactly at the base model. Dropout applies to the adapter's input only, a fresh mask per
// targeted weight, micro-batch element and training step (model/lora_dropout.h).
//
// lora_units turns the plain layout (param_units.h) into the fine-tuning one: every base
// parameter becomes a frozen slot (dense in the compute dtype, or NF4 for the blocks'
// matrices when quantized; embedding, norms and lm_head stay dense, as bitsandbytes leaves
// them), and each targeted weight gets its adapters as trainable slots named
// "<slot>.lora_A" / "<slot>.lora_B" with PEFT's names as their hf_name
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/dtype.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

struct LoraSpec {
  bool enabled = false;
  int64_t rank = 8;                  // r
  double alpha = 16;                 // lora_alpha
  double dropout = 0;                // lora_dropout
  bool rslora = false;               // use_rslora: s = alpha / sqrt(r)
  std::vector<std::string> targets;  // module names (q_proj, ..., w1) or "all-linear"

  double scale() const;
};

enum class Quantization : uint8_t { None, Nf4 };

struct PeftSpec {
  LoraSpec lora;
  Quantization quantization = Quantization::None;
  DType frozen_dtype = DType::F32;     // dense frozen weights are stored in it (the compute dtype)
  DType nf4_value_dtype = DType::F32;  // NF4 weights' dtype before quantization
};

// The module names a target may name in this model (Llama: q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj; Mixtral: q_proj, k_proj, v_proj, o_proj, w1, w2, w3), in
// that order. "all-linear" means all of them (PEFT: every Linear but the output layer).
std::vector<std::string> lora_target_modules(const LlamaConfig& cfg);
// The module a slot belongs to ("q_proj" for layers.3.wq, "w1" for an expert's w1), or ""
// when no target can name it (embedding, norms, lm_head, the router).
std::string lora_module_of(const ParamSlot& slot);
// PEFT's tensor name of a slot's adapter: "base_model.model.<module path>.lora_A.weight".
std::string peft_tensor_name(const std::string& hf_weight_name, const char* which);

// The layout for `peft` (the plain one when LoRA is off). Errors name the key and the
// module: a target naming no module of the model, a rank outside [1, min(in, out)] of a
// targeted weight, an NF4 weight whose element count is not a multiple of 64, an NF4 base
// split off the NF4 blocks (nf4_split_refusal). Tensor rank `tensor_rank`'s slices with
// cfg.tensor_parallel > 1 (llama_units), each adapter split as its base, an NF4 weight's
// slice in the sliced format (See Note [LoRA under tensor parallelism] in peft_units.cpp).
std::vector<UnitLayout> lora_units(const LlamaConfig& cfg, const PeftSpec& peft, int tensor_rank = 0,
                                   int expert_rank = 0);

// Why an NF4 base cannot be split over cfg.tensor_parallel ranks, naming the first weight
// whose slice is not made of whole 64-element blocks of the weight quantized whole (a row
// slice of fewer than 64 elements' multiple, or a column slice of a width that is not a
// multiple of 64), or "" when every slice is.
std::string nf4_split_refusal(const LlamaConfig& cfg);

}  // namespace fsdp::model
