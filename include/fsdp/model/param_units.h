// How the model's parameters are grouped into units, the granularity FSDP shards,
// gathers and frees at: the embedding, each transformer block, and the final norm with
// the output head. Each unit is one flat buffer; every parameter is a contiguous slice
// of it at a fixed offset, in an order chosen so fused GEMMs need no copies
// (q|k|v are adjacent, and so are gate|up). Norm weights come last in a block.
// With tied embeddings the head unit holds only the final norm and reads the embedding
// unit's table as its output weight (UnitLayout::reads_unit): the table has one owner, one
// master copy, one set of AdamW moments, and its gradient is the sum of both uses.
// A mixture-of-experts block holds, instead of the dense MLP, the router [E, C], then
// every expert's w1|w3 ([2F, C] each, adjacent: one fused GEMM), then every expert's w2
// [C, F]: the order of transformers 5's fused gate_up_proj and down_proj tensors.
//
// Fine-tuning with LoRA (model/peft.h) splits a unit in two: its trainable flat buffer
// holds only the adapters (lora_A, lora_B of each targeted weight: the params below), and
// the frozen base goes to a second buffer of bytes (the frozen slots), which FSDP shards
// and gathers but never reduces or updates. A frozen weight is stored dense in the compute
// dtype, or as NF4 (fsdp/ops/nf4.h) pieces when the base is quantized. Frozen slots keep
// the order above, so a fused q|k|v is three adjacent dense ranges or three NF4 weights.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

// Tensor parallelism: which slice of the whole parameter a slot holds on this tensor rank
// (See Note [Tensor parallel layout] in param_units.cpp). dim -1: all of it (replicated
// over the tensor group); 0: rows [index * rows, (index + 1) * rows) of a parameter of
// `parts` times the slot's rows (column-parallel); 1: columns likewise (row-parallel).
struct TensorSlice {
  int dim = -1;
  int parts = 1;
  int index = 0;
  bool replicated() const { return dim < 0; }
  bool operator==(const TensorSlice&) const = default;
};

// The whole parameter's shape, given a slice's `shape`; and element i of the slice
// (row-major) as an element of the whole parameter (row-major).
Dims whole_shape(const Dims& shape, const TensorSlice& tp);
int64_t whole_index(const Dims& shape, const TensorSlice& tp, int64_t i);
// Elements [first, first + n) of a slice as runs contiguous in the whole parameter (one
// run, or one per row of a column slice): fn(slice element, whole element, length).
template <typename Fn>
void for_each_whole_run(const Dims& shape, const TensorSlice& tp, int64_t first, int64_t n, Fn&& fn) {
  for (int64_t at = first; at < first + n;) {
    const int64_t run = tp.dim == 1 ? std::min(first + n - at, shape[1] - at % shape[1]) : first + n - at;
    fn(at, whole_index(shape, tp, at), run);
    at += run;
  }
}

struct ParamSlot {
  std::string name;     // ours, e.g. "layers.3.wq"
  std::string hf_name;  // Hugging Face's, e.g. "model.layers.3.self_attn.q_proj.weight"
  Dims shape;
  int64_t offset = 0;   // elements from the start of the unit's flat buffer
  int64_t numel = 0;
  bool weight_decay = true;  // matrices decay, norm weights do not (as nanoGPT / llm.c)
  // 0: normal(0, init_std), 1: ones (norm weights), 2: Kaiming-uniform with a = sqrt(5)
  // (PEFT's lora_A: uniform in +-1/sqrt(fan_in)), 3: zeros (PEFT's lora_B)
  int init_kind = 0;
  // Where the same values sit in transformers 5's fused expert layout, if anywhere: a
  // tensor holding every expert's weight (e.g. "model.layers.3.mlp.experts.gate_up_proj",
  // [E, 2F, C]) and this slot's first element in it. Empty for everything but experts.
  // hf_fused_shape is that tensor's whole shape: an import checks it in full (element
  // counts alone let [E, C, 2F], or 2E experts as [E, 4F, C], through with wrong weights).
  std::string hf_fused_name;
  int64_t hf_fused_offset = 0;
  Dims hf_fused_shape;
  // Tensor parallelism: the slice this slot holds, and where the whole parameter starts in
  // the whole model's unit (the unit as one rank lays it out: == offset without tensor
  // parallelism). Seeded initialisation and checkpoints number elements by it, so every
  // layout sees the same values.
  TensorSlice tp;
  int64_t whole_offset = 0;

  Dims whole_shape() const { return model::whole_shape(shape, tp); }
  // Element i of this slot (row-major in the slice) as an element of the whole parameter.
  int64_t whole_index(int64_t i) const { return model::whole_index(shape, tp, i); }
};

// How a frozen weight's values are stored in its unit's frozen bytes.
enum class FrozenFormat : uint8_t { Dense, Nf4 };

// One frozen parameter: where its bytes lie in the unit's frozen buffer.
struct FrozenSlot {
  std::string name;     // ours, as the trainable slot it replaces ("layers.3.wq")
  std::string hf_name;  // Hugging Face's ("model.layers.3.self_attn.q_proj.weight")
  std::string hf_fused_name;  // as ParamSlot's (an expert in transformers 5's fused layout)
  int64_t hf_fused_offset = 0;
  Dims hf_fused_shape;
  Dims shape;
  int64_t numel = 0;
  TensorSlice tp;  // the slice this rank holds, as ParamSlot's
  FrozenFormat format = FrozenFormat::Dense;
  // Dense: the element dtype stored (the compute dtype). Nf4: the weight's dtype before
  // quantization (bitsandbytes' quant_state.dtype), which dequantized values are rounded to.
  DType dtype = DType::F32;
  int64_t byte_offset = 0;  // first byte in the unit's frozen buffer
  int64_t bytes = 0;        // bytes it takes (Nf4: all its pieces)
  // Nf4: each piece's first byte, from byte_offset (fsdp/ops/nf4.h for their sizes). A
  // tensor-parallel slice (sliced: tp not replicated) holds a slice of the weight quantized
  // whole: packed, block_absmax and code only (fsdp/ops/nf4.h, "A slice").
  struct Nf4Pieces {
    int64_t packed = 0, absmax = 0, nested_absmax = 0, offset = 0, nested_code = 0, code = 0;
    int64_t block_absmax = 0;
    bool sliced = false;
  } nf4;

  Dims whole_shape() const { return model::whole_shape(shape, tp); }
  int64_t whole_index(int64_t i) const { return model::whole_index(shape, tp, i); }
};

// A parameter of a unit, wherever it lives: exactly one of the two is set.
struct SlotRef {
  const ParamSlot* trainable = nullptr;
  const FrozenSlot* frozen = nullptr;
};

struct UnitLayout {
  std::string name;  // "embedding", "layers.N", "head"
  std::vector<ParamSlot> params;  // trainable
  int64_t numel = 0;
  // Another unit whose parameters this unit's computation reads too (-1: none). The tied
  // head reads the embedding unit: a ParamProvider hands out both while the head runs,
  // and the embedding unit's gradient sums the head's use and its own (fsdp_engine.h).
  int reads_unit = -1;
  std::vector<FrozenSlot> frozen;  // frozen (LoRA's base): empty when everything trains
  int64_t frozen_bytes = 0;
  // The adapters' scale and dropout (model/peft.h), when the unit has any.
  double lora_scale = 0, lora_dropout = 0;
  // Expert parallelism (model/expert_parallel.h): this unit holds this expert rank's experts
  // of the block unit `experts_of`, which reads it (a ParamProvider hands out both while the
  // block runs); -1: not an expert unit. Its slots' whole_offset are their offsets in that
  // block's one-rank layout, and seeded initialisation draws from that block's stream, so
  // every expert gets the values one process gives it.
  int experts_of = -1;

  const ParamSlot& slot(const std::string& name) const;  // trainable, by our name; error if absent
  const FrozenSlot& frozen_slot(const std::string& name) const;  // error if absent
  bool has(const std::string& name) const;  // a trainable slot of that name exists
  SlotRef find(const std::string& name) const;  // trainable or frozen; error if neither
  // View of one parameter inside the unit's flat buffer `flat` (1-D, numel() elements).
  Tensor view(const Tensor& flat, const std::string& name) const;
};

// Units: embedding, layers.0 .. layers.L-1, head. With cfg.tensor_parallel T > 1, tensor
// rank `tensor_rank`'s slices (model/tensor_parallel.h): the same slots in the same order,
// each the rank's share of its parameter. With expert units (cfg.expert_units(): a mixture
// of experts with cfg.expert_parallel > 1) every block unit holds all but its experts, and
// L expert units follow the head: "layers.<l>.experts", expert rank `expert_rank`'s experts
// of block l, every expert's w1|w3 then every expert's w2 as in the block. They run with
// their block (UnitLayout::experts_of); appended rather than interleaved, so that every
// index below stays what it is without expert parallelism.
std::vector<UnitLayout> llama_units(const LlamaConfig& cfg, int tensor_rank = 0, int expert_rank = 0);

// Index helpers for that order.
inline int embedding_unit() { return 0; }
inline int block_unit(int layer) { return 1 + layer; }
inline int head_unit(const LlamaConfig& cfg) { return 1 + int(cfg.num_layers); }
// Block `layer`'s expert unit, or -1 without expert units.
inline int expert_unit(const LlamaConfig& cfg, int layer) {
  return cfg.expert_units() ? head_unit(cfg) + 1 + layer : -1;
}

}  // namespace fsdp::model
