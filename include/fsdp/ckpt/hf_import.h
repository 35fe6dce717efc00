// Loading a Hugging Face Llama folder (config.json + one or many *.safetensors, with or
// without model.safetensors.index.json) into the model's flat parameter units.
// Refuses, with one message naming the folder and tensor, a missing tensor, a shape that
// differs from the model's, an unsupported dtype, or a config.json the model cannot
// represent (a rope_scaling type other than linear or llama3, biases, non-silu activation).
// A folder with tie_word_embeddings has no lm_head.weight to read (one that is there anyway
// is ignored, as transformers ties it over).
#pragma once

#include <string>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::ckpt {

// Where a slot's values are in the folder: its own tensor, or (an expert's weight in
// transformers 5's layout) its range of a fused tensor; the entry covers exactly the slot's
// elements. Errors name the folder and tensor (missing, wrong shape, not a float dtype).
TensorEntry hf_source_of(const SafetensorsFolder& folder, const model::ParamSlot& slot);

// Reads <folder>/config.json into a LlamaConfig.
model::LlamaConfig read_hf_llama_config(const std::string& folder);

// Tensors of the folder that a model of shape `cfg` does not use. Layers or experts beyond
// config.json's (model.layers.<N>. with N >= num_hidden_layers, experts.<E>. with E >=
// num_local_experts) are an error naming the first of them: the weights and config.json
// disagree, so either would be read wrong. Any other tensor not used is logged as a
// warning (transformers does the same), at most a few by name. Rotary inv_freq buffers,
// and lm_head.weight under tie_word_embeddings, are known to be unused.
void check_unused_tensors(const SafetensorsFolder& folder, const model::LlamaConfig& cfg);

// read_as_f32 of `part` (some or all of tensor `name`'s elements), refusing a NaN or an
// infinity by the file, the tensor and the element: a non-finite weight only shows later
// as a NaN loss or non-finite logits.
void read_finite_f32(const TensorEntry& part, const std::string& name, int64_t first_element, float* out);

// Checks that every parameter of `unit` exists in the folder with the right shape and a
// float dtype, then fills `flat`, which holds the elements [begin, begin + flat.numel())
// of the unit's flat buffer (float32, CPU). Only that range is read from the files, so a
// rank can load its shard without ever holding the whole model. Padding past the unit's
// parameters is zeroed.
void load_hf_unit(const SafetensorsFolder& folder, const model::UnitLayout& unit, const Tensor& flat,
                  int64_t begin = 0);

}  // namespace fsdp::ckpt
