// A Hugging Face folder as the source of a frozen base (model/frozen_bytes.h), plain or
// quantized by bitsandbytes.
//
// A plain folder gives float values (F32, BF16, F16 or F64 tensors), read for just the
// elements asked for; an NF4 slot is then quantized by our bitsandbytes-exact quantizer.
// A bitsandbytes 4-bit folder (config.json's quantization_config.quant_method
// "bitsandbytes", load_in_4bit, saved by save_pretrained) stores each quantized Linear as
// <name>.weight (the packed codes, in any bnb_4bit_quant_storage dtype: its bytes are read),
// .weight.absmax, .weight.nested_absmax, .weight.nested_quant_map, .weight.quant_map and
// .weight.quant_state.bitsandbytes__nf4 (JSON: quant_type, blocksize, dtype, shape,
// nested_blocksize, nested_offset); those pieces are taken as they are, and read as values
// (dense frozen slots, export --merge) they are dequantized. What we do not implement is
// refused by name: fp4, a block size other than 64, no double quantization, 8-bit.
#pragma once

#include <optional>
#include <string>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/dtype.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::ckpt {

class HfFrozenSource final : public model::FrozenSource {
 public:
  explicit HfFrozenSource(const SafetensorsFolder& folder) : folder_(folder) {}
  void values(const model::FrozenSlot& slot, int64_t first, const Tensor& out) override;
  bool nf4_pieces(const model::FrozenSlot& slot, const Nf4Tensors& out) override;

 private:
  const SafetensorsFolder& folder_;
};

// Whether <folder>/config.json says its weights are bitsandbytes 4-bit (and refuses, by
// name, a bitsandbytes configuration we cannot load).
bool is_bnb_4bit_folder(const std::string& folder);

// The dtype the folder's block matrices hold their values in (the first layer's q_proj):
// the tensor's (F64 counts as F32), or a bitsandbytes quant_state's dtype. NF4 weights are
// rounded to it when dequantized, as bitsandbytes' quant_state.dtype.
DType base_weight_dtype(const SafetensorsFolder& folder);

}  // namespace fsdp::ckpt
