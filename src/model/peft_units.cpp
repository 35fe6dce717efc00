// The fine-tuning layout: the plain units with their base frozen and adapters added; see
// model/peft.h. Frozen bytes: a dense slot starts at a multiple of its element size (so
// fused neighbours, q|k|v and gate|up, stay adjacent and one GEMM reads them), an NF4 slot
// and each of its pieces at a multiple of 16 bytes (the widest access a kernel makes).
#include <algorithm>
#include <cmath>
#include <set>

#include "fsdp/core/error.h"
#include "fsdp/model/peft.h"
#include "fsdp/ops/nf4.h"

namespace fsdp::model {

double LoraSpec::scale() const { return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

std::vector<std::string> lora_target_modules(const LlamaConfig& cfg) {
  if (cfg.is_moe()) return {"q_proj", "k_proj", "v_proj", "o_proj", "gate", "w1", "w2", "w3"};
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

std::string lora_module_of(const ParamSlot& slot) {
  const std::string suffix = ".weight";
  if (slot.shape.size() != 2 || !slot.hf_name.starts_with("model.layers.") || !slot.hf_name.ends_with(suffix))
    return "";
  const std::string module = slot.hf_name.substr(0, slot.hf_name.size() - suffix.size());
  return module.substr(module.rfind('.') + 1);
}

std::string peft_tensor_name(const std::string& hf_weight_name, const char* which) {
  const std::string suffix = ".weight";
  FSDP_CHECK(hf_weight_name.ends_with(suffix), "'{}' is not a weight", hf_weight_name);
  return "base_model.model." + hf_weight_name.substr(0, hf_weight_name.size() - suffix.size()) + "." + which +
         ".weight";
}

// Note [LoRA under tensor parallelism]
// Adapters follow their base (Megatron-LM's and PEFT's tensor-parallel LoRA):
//   column-parallel base (q, k, v, gate, up: rows split): lora_A [r, in] whole, lora_B
//     [out / T, r] split on its rows like the base. The Linear runs on every row of the
//     all-gathered input, so u = d(x) A^T is whole on every rank and dB is complete; dA
//     sums only this rank's outputs, a partial sum the engine all-reduces over the tensor
//     group as it does every whole slot's gradient. The adapter's share of dx is partial
//     too, as the base's is (reduce-scattered after the Linear).
//   row-parallel base (o, down: columns split): lora_A [r, in / T] split on its columns
//     like the base, lora_B [out, r] whole. The input is this rank's columns and the output
//     a partial sum reduce-scattered afterwards; s B (A_t x_t) added into it sums to
//     s B A x over the group (B is linear), so the forward needs no collective of its own.
//     dA_t is complete, dB a partial sum (all-reduced, a whole slot).
// Dropout draws its mask at the global column (LoraAdapter's col0), so a tensor group
// drops what one process drops. Each adapter's whole_offset is the one-rank layout's, so
// seeded initialisation, checkpoints, PEFT exports and lora.init_from see the same values
// at every T. The frozen base's slots carry their base's slice (FrozenSlot::tp): every
// FrozenSource returns the slice's values. An NF4 base is quantized whole, as one process
// quantizes it, and each rank keeps its slice's blocks (fsdp/ops/nf4.h, "A slice"): the
// double-quantized absmax cannot be sliced (a row-parallel slice's blocks are strided
// through the groups of 256 that share a scale), so a slice stores each block's absmax' as
// the whole's dequantization computes it, and dequantizes to one process's bits. Its blocks
// must be whole blocks of the weight: a column-parallel slice of a multiple of 64 elements,
// a row-parallel one of a width that is a multiple of 64 (nf4_split_refusal).

namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// The slot's bytes placed at the end of the unit's frozen buffer.
void add_frozen(UnitLayout& u, const ParamSlot& p, FrozenFormat format, DType dtype) {
  FrozenSlot f;
  f.name = p.name;
  f.hf_name = p.hf_name;
  f.hf_fused_name = p.hf_fused_name;
  f.hf_fused_offset = p.hf_fused_offset;
  f.hf_fused_shape = p.hf_fused_shape;
  f.shape = p.shape;
  f.numel = p.numel;
  f.tp = p.tp;
  f.format = format;
  f.dtype = dtype;
  if (format == FrozenFormat::Dense) {
    f.byte_offset = align_up(u.frozen_bytes, int64_t(dtype_size(dtype)));
    f.bytes = p.numel * int64_t(dtype_size(dtype));
  } else {
    FSDP_CHECK(p.numel % kNf4BlockSize == 0,
               "model.quantization nf4: {} ({}, {} elements) is not a multiple of the NF4 block size {}", p.name,
               p.hf_name, p.numel, kNf4BlockSize);
    f.byte_offset = align_up(u.frozen_bytes, 16);
    int64_t at = 0;
    auto piece = [&](int64_t bytes) {
      const int64_t begin = at;
      at = align_up(at + bytes, 16);
      return begin;
    };
    if (!p.tp.replicated()) {
      f.nf4.sliced = true;
      f.nf4.packed = piece(nf4_packed_bytes(p.numel));
      f.nf4.block_absmax = piece(4 * nf4_blocks(p.numel));
      f.nf4.code = piece(4 * 16);
      f.bytes = at;
      u.frozen_bytes = f.byte_offset + f.bytes;
      u.frozen.push_back(std::move(f));
      return;
    }
    f.nf4.packed = piece(nf4_packed_bytes(p.numel));
    f.nf4.absmax = piece(nf4_blocks(p.numel));
    f.nf4.nested_absmax = piece(4 * nf4_nested_blocks(p.numel));
    f.nf4.offset = piece(4);
    f.nf4.nested_code = piece(4 * 256);
    f.nf4.code = piece(4 * 16);
    f.bytes = at;
  }
  u.frozen_bytes = f.byte_offset + f.bytes;
  u.frozen.push_back(std::move(f));
}

// The adapter `which` of `base` follows its base's split (See Note [LoRA under tensor
// parallelism]): lora_A [r, in] is split like a row-parallel base's columns, lora_B [out, r]
// like a column-parallel base's rows; the other one is whole on every tensor rank.
void add_adapter(UnitLayout& u, const ParamSlot& base, int64_t rank, const char* which) {
  ParamSlot s;
  const bool a = std::string(which) == "lora_A";
  s.name = base.name + "." + which;
  s.hf_name = peft_tensor_name(base.hf_name, which);
  s.shape = a ? Dims{rank, base.shape[1]} : Dims{base.shape[0], rank};
  if ((a && base.tp.dim == 1) || (!a && base.tp.dim == 0)) s.tp = base.tp;
  s.offset = u.numel;
  s.whole_offset = u.numel;  // one rank's layout; lora_units sets it under tensor parallelism
  s.numel = s.shape.numel();
  s.weight_decay = true;
  s.init_kind = a ? 2 : 3;
  u.numel += s.numel;
  u.params.push_back(std::move(s));
}

// The targets as a set of module names, each checked against the model.
std::set<std::string> resolve_targets(const LlamaConfig& cfg, const LoraSpec& lora) {
  const std::vector<std::string> modules = lora_target_modules(cfg);
  std::string known;
  for (const auto& m : modules) known += (known.empty() ? "" : ", ") + m;
  FSDP_CHECK(!lora.targets.empty(), "lora.targets is empty: name the modules to adapt ({}), or all-linear", known);
  std::set<std::string> out;
  for (const std::string& t : lora.targets) {
    if (t == "all-linear") {
      out.insert(modules.begin(), modules.end());
      continue;
    }
    FSDP_CHECK(std::find(modules.begin(), modules.end(), t) != modules.end(),
               "lora.targets: '{}' names no module of this model (its modules: {}, or all-linear)", t, known);
    out.insert(t);
  }
  return out;
}

}  // namespace

std::string nf4_split_refusal(const LlamaConfig& cfg) {
  if (cfg.tensor_parallel == 1) return "";
  for (const UnitLayout& u : llama_units(cfg, 0)) {
    for (const ParamSlot& p : u.params) {
      if (lora_module_of(p).empty() || p.tp.replicated()) continue;
      const bool rows = p.tp.dim == 0;
      const int64_t size = rows ? p.numel : p.shape[1];
      if (size % kNf4BlockSize == 0) continue;
      return fmt::format("{} ({}, {}) splits into {} {} per tensor rank, not a multiple of the NF4 block size {}: "
                         "each rank's NF4 blocks must be blocks of the weight quantized whole (a parallel.tensor "
                         "that leaves a multiple of 64 fits)",
                         p.name, p.hf_name, p.whole_shape().str(), size, rows ? "elements (rows)" : "columns",
                         kNf4BlockSize);
    }
  }
  return "";
}

std::vector<UnitLayout> lora_units(const LlamaConfig& cfg, const PeftSpec& peft, int tensor_rank, int expert_rank) {
  std::vector<UnitLayout> plain = llama_units(cfg, tensor_rank, expert_rank);
  if (peft.quantization == Quantization::Nf4) {
    const std::string refusal = nf4_split_refusal(cfg);
    FSDP_CHECK(refusal.empty(), "model.quantization nf4 with parallel.tensor {}: {}", cfg.tensor_parallel, refusal);
  }
  if (!peft.lora.enabled) {
    FSDP_CHECK(peft.quantization == Quantization::None,
               "model.quantization nf4 needs lora.enabled: true (a quantized base can only be fine-tuned through "
               "adapters)");
    return plain;
  }
  // Under expert parallelism an expert unit gets its experts' frozen base and adapters like
  // any unit (See Note [LoRA on expert-parallel experts] in mlp_moe.h).
  const LoraSpec& lora = peft.lora;
  const std::set<std::string> targets = resolve_targets(cfg, lora);
  std::vector<UnitLayout> out;
  for (const UnitLayout& u : plain) {
    UnitLayout f;
    f.name = u.name;
    f.reads_unit = u.reads_unit;  // a tied head reads the (frozen) table
    f.experts_of = u.experts_of;
    for (const ParamSlot& p : u.params) {
      const bool matrix_in_block = !lora_module_of(p).empty();
      const bool nf4 = peft.quantization == Quantization::Nf4 && matrix_in_block;
      add_frozen(f, p, nf4 ? FrozenFormat::Nf4 : FrozenFormat::Dense, nf4 ? peft.nf4_value_dtype : peft.frozen_dtype);
    }
    for (const ParamSlot& p : u.params) {
      if (!targets.count(lora_module_of(p))) continue;
      const Dims whole = p.whole_shape();
      const int64_t width = std::min(whole[0], whole[1]);
      FSDP_CHECK(lora.rank >= 1 && lora.rank <= width,
                 "lora.rank {} is outside [1, {}] for {} ({} is {}); LoRA's rank must not exceed the layer's width",
                 lora.rank, width, p.name, p.hf_name, whole.str());
      add_adapter(f, p, lora.rank, "lora_A");
      add_adapter(f, p, lora.rank, "lora_B");
    }
    f.frozen_bytes = align_up(f.frozen_bytes, 16);
    f.lora_scale = lora.scale();
    f.lora_dropout = lora.dropout;
    out.push_back(std::move(f));
  }
  if (cfg.tensor_parallel > 1 || cfg.expert_units()) {
    // Each adapter numbered as in one rank's layout (an expert unit's in its block's):
    // seeded initialisation and checkpoints go by it (See Note [Tensor parallel layout] in
    // param_units.cpp).
    LlamaConfig one = cfg;
    one.tensor_parallel = 1;
    one.expert_parallel = 1;
    const std::vector<UnitLayout> whole = lora_units(one, peft);
    for (size_t u = 0; u < out.size(); ++u) {
      const UnitLayout& w = whole[size_t(out[u].experts_of >= 0 ? out[u].experts_of : int(u))];
      for (ParamSlot& s : out[u].params) s.whole_offset = w.slot(s.name).offset;
    }
  }
  return out;
}

}  // namespace fsdp::model
