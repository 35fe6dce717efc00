// RoPE frequencies of a Llama config, with the scaling of its rope_scaling (llama_config.h),
// exactly as transformers 4.x's ROPE_INIT_FUNCTIONS compute them (computed here in double):
//
//   default  inv_freq[i] = theta^(-2i/D),  i < D/2
//   linear   inv_freq[i] / factor
//   llama3   wavelen = 2 pi / inv_freq[i]; with L = original_max_position,
//              wavelen < L / high_freq_factor   inv_freq[i]            (high frequencies kept)
//              wavelen > L / low_freq_factor    inv_freq[i] / factor   (low frequencies scaled)
//              otherwise, s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
//                                               (1 - s) inv_freq[i] / factor + s inv_freq[i]
//
// Neither type changes attention's scale (transformers' attention_factor is 1 for both).
#pragma once

#include <string_view>
#include <vector>

#include "fsdp/model/llama_config.h"
#include "fsdp/ops/rope.h"

namespace fsdp::model {

// "none", "linear", "llama3": the spelling of config.json's rope_type and of model.rope_scaling.
std::string_view rope_scaling_name(RopeScaling::Type type);
// The type of that name; anything else (dynamic, yarn, longrope, ...) is an error naming it.
RopeScaling::Type rope_scaling_type(std::string_view name);

// The D/2 frequencies the config's rotary embedding uses, scaling applied.
std::vector<double> rope_inv_freq(const LlamaConfig& cfg);

// Tables for positions [0, positions) on `device` (built on the host, moved once).
RopeTables llama_rope_tables(const LlamaConfig& cfg, int64_t positions, Device device = Device::cpu());

}  // namespace fsdp::model
