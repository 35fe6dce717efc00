// The dense bf16 tensor-core peak of a GPU, from its name: the denominator of the step
// log's MFU (model FLOPs utilisation), as torchtitan and llm.c report it: achieved model
// FLOP/s (6N + attention per token, whatever the dtype) over the bf16 peak. Vendor
// datasheet figures without sparsity. FSDP_PEAK_TFLOPS overrides the table (a GPU it does
// not know, or another clock); unknown and not overridden: no MFU, only FLOP/s.
#pragma once

#include <optional>
#include <string>

namespace fsdp::obs {

// FLOP/s, or nullopt when the name is not in the table and FSDP_PEAK_TFLOPS is unset.
std::optional<double> peak_bf16_flops(const std::string& device_name);

}  // namespace fsdp::obs
