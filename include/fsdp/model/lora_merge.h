// A LoRA unit merged back into a plain one (what PEFT's merge_and_unload does): every
// frozen parameter's values (dense widened to float32, NF4 dequantized through its dtype),
// and for each adapted weight W + s * B A. Used to export a merged Hugging Face model and to
// generate from a base with its adapters, with the plain model's code.
#pragma once

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

// `lora` is a unit of lora_units' layout, `frozen` its frozen bytes (host, whole unit) and
// `adapters` its trainable buffer (host float32); `plain` the same unit of llama_units'
// layout and `out` its flat buffer (host float32, at least plain.numel elements).
void merge_lora_unit(const UnitLayout& lora, const Tensor& frozen, const Tensor& adapters, const UnitLayout& plain,
                     const Tensor& out);

}  // namespace fsdp::model
