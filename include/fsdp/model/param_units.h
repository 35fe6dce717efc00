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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

struct ParamSlot {
  std::string name;     // ours, e.g. "layers.3.wq"
  std::string hf_name;  // Hugging Face's, e.g. "model.layers.3.self_attn.q_proj.weight"
  Dims shape;
  int64_t offset = 0;   // elements from the start of the unit's flat buffer
  int64_t numel = 0;
  bool weight_decay = true;  // matrices decay, norm weights do not (as nanoGPT / llm.c)
  int init_kind = 0;         // 0: normal(0, init_std), 1: ones (norm weights)
  // Where the same values sit in transformers 5's fused expert layout, if anywhere: a
  // tensor holding every expert's weight (e.g. "model.layers.3.mlp.experts.gate_up_proj",
  // [E, 2F, C]) and this slot's first element in it. Empty for everything but experts.
  std::string hf_fused_name;
  int64_t hf_fused_offset = 0;
};

struct UnitLayout {
  std::string name;  // "embedding", "layers.N", "head"
  std::vector<ParamSlot> params;
  int64_t numel = 0;
  // Another unit whose parameters this unit's computation reads too (-1: none). The tied
  // head reads the embedding unit: a ParamProvider hands out both while the head runs,
  // and the embedding unit's gradient sums the head's use and its own (fsdp_engine.h).
  int reads_unit = -1;

  const ParamSlot& slot(const std::string& name) const;  // by our name; error if absent
  // View of one parameter inside the unit's flat buffer `flat` (1-D, numel() elements).
  Tensor view(const Tensor& flat, const std::string& name) const;
};

// Units in execution order: embedding, layers.0 .. layers.L-1, head.
std::vector<UnitLayout> llama_units(const LlamaConfig& cfg);

// Index helpers for that order.
inline int embedding_unit() { return 0; }
inline int block_unit(int layer) { return 1 + layer; }
inline int head_unit(const LlamaConfig& cfg) { return 1 + int(cfg.num_layers); }

}  // namespace fsdp::model
