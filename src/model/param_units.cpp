#include "fsdp/model/param_units.h"

#include "fsdp/core/error.h"

namespace fsdp::model {

const ParamSlot& UnitLayout::slot(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return p;
  FSDP_FAIL("unit '{}' has no parameter '{}'", name, n);
}

const FrozenSlot& UnitLayout::frozen_slot(const std::string& n) const {
  for (const auto& p : frozen)
    if (p.name == n) return p;
  FSDP_FAIL("unit '{}' has no frozen parameter '{}'", name, n);
}

bool UnitLayout::has(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return true;
  return false;
}

SlotRef UnitLayout::find(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return SlotRef{&p, nullptr};
  for (const auto& p : frozen)
    if (p.name == n) return SlotRef{nullptr, &p};
  FSDP_FAIL("unit '{}' has no parameter '{}'", name, n);
}

Tensor UnitLayout::view(const Tensor& flat, const std::string& n) const {
  const ParamSlot& s = slot(n);
  FSDP_CHECK(flat.dim() == 1 && flat.numel() >= numel, "flat buffer {} too small for unit '{}' ({} elements)",
             flat.str(), name, numel);
  return flat.narrow(0, s.offset, s.numel).reshape(s.shape);
}

Dims whole_shape(const Dims& shape, const TensorSlice& tp) {
  if (tp.replicated()) return shape;
  Dims w = shape;
  w[size_t(tp.dim)] *= tp.parts;
  return w;
}

int64_t whole_index(const Dims& shape, const TensorSlice& tp, int64_t i) {
  if (tp.replicated()) return i;
  const int64_t cols = shape[1];
  const int64_t r = i / cols, c = i % cols;
  if (tp.dim == 0) return (int64_t(tp.index) * shape[0] + r) * cols + c;
  return r * cols * tp.parts + int64_t(tp.index) * cols + c;
}

// Note [Tensor parallel layout]
// With cfg.tensor_parallel T, tensor rank t's units hold the same slots in the same order
// as one rank's, each its slice of the parameter (TensorSlice):
//   rows split (column-parallel, dim 0):  wq, wk, wv (whole heads: rows of head_dim), w_gate,
//       w_up, each expert's w1 and w3, lm_head and tok_embeddings (the vocabulary)
//   columns split (row-parallel, dim 1):  wo, w_down, each expert's w2
//   whole (replicated):                   attn_norm, mlp_norm, norm, the router
// So the fused q|k|v and gate|up stay adjacent slices, one GEMM on the rank's heads and
// MLP columns; every tensor rank's unit has the same size (the splits are even), so FSDP
// shards each rank's unit over its shard group as it would one rank's, and a replicated
// slot sits at the same offset on every tensor rank (the engine all-reduces its gradient
// over the tensor group there). ParamSlot::whole_offset and whole_index number each element
// as one rank's layout does, which seeded initialisation and checkpoints go by.
namespace {

// The slice of dimension `dim` (-1: none) of a parameter of whole shape `shape` that
// tensor rank `rank` of `parts` holds.
struct Split {
  int dim = -1;
  int parts = 1, rank = 0;
};

void add(UnitLayout& u, const std::string& name, const std::string& hf, Dims shape, bool decay, int init_kind,
         Split split = {}) {
  ParamSlot s;
  s.name = name;
  s.hf_name = hf;
  if (split.dim >= 0 && split.parts > 1) {
    FSDP_CHECK(shape[size_t(split.dim)] % split.parts == 0, "{}: dimension {} of {} does not split over {} tensor ranks",
               name, split.dim, shape.str(), split.parts);
    shape[size_t(split.dim)] /= split.parts;
    s.tp = TensorSlice{split.dim, split.parts, split.rank};
  }
  s.shape = shape;
  s.offset = u.numel;
  s.whole_offset = u.numel;  // one rank's layout; llama_units sets it under tensor parallelism
  s.numel = shape.numel();
  s.weight_decay = decay;
  s.init_kind = init_kind;
  u.numel += s.numel;
  u.params.push_back(std::move(s));
}

// Mixtral's sparse MLP. Names as transformers 4.x writes them (block_sparse_moe.gate,
// block_sparse_moe.experts.<e>.w1/w2/w3: w1 the gate projection, w3 the up projection,
// w2 the down projection), each also found in transformers 5's fused tensors.
// Experts [first, first + count)'s w1|w3 (adjacent per expert: one fused GEMM), then their w2.
void add_expert_matrices(UnitLayout& x, const LlamaConfig& c, const std::string& p, const std::string& hf, Split rows,
                         Split cols, int64_t first, int64_t count) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, E = c.num_experts;
  for (int64_t e = first; e < first + count; ++e) {
    const std::string ours = p + "experts." + std::to_string(e) + ".", theirs = hf + "block_sparse_moe.experts." +
                                                                              std::to_string(e) + ".";
    add(x, ours + "w1", theirs + "w1.weight", {F, C}, true, 0, rows);
    x.params.back().hf_fused_name = hf + "mlp.experts.gate_up_proj";
    x.params.back().hf_fused_offset = e * 2 * F * C;
    x.params.back().hf_fused_shape = {E, 2 * F, C};
    add(x, ours + "w3", theirs + "w3.weight", {F, C}, true, 0, rows);
    x.params.back().hf_fused_name = hf + "mlp.experts.gate_up_proj";
    x.params.back().hf_fused_offset = e * 2 * F * C + F * C;
    x.params.back().hf_fused_shape = {E, 2 * F, C};
  }
  for (int64_t e = first; e < first + count; ++e) {
    add(x, p + "experts." + std::to_string(e) + ".w2", hf + "block_sparse_moe.experts." + std::to_string(e) + ".w2.weight",
        {C, F}, true, 0, cols);
    x.params.back().hf_fused_name = hf + "mlp.experts.down_proj";
    x.params.back().hf_fused_offset = e * C * F;
    x.params.back().hf_fused_shape = {E, C, F};
  }
}

// The router goes to the block `b`, the experts [first, first + count) to `x` (the block
// itself, or its expert unit). (the block itself, or its expert unit).
void add_experts(UnitLayout& b, UnitLayout& x, const LlamaConfig& c, const std::string& p, const std::string& hf,
                 Split rows, Split cols, int64_t first, int64_t count) {
  const int64_t C = c.hidden_size, E = c.num_experts;
  add(b, p + "router", hf + "block_sparse_moe.gate.weight", {E, C}, true, 0);
  b.params.back().hf_fused_name = hf + "mlp.gate.weight";
  b.params.back().hf_fused_shape = {E, C};
  add_expert_matrices(x, c, p, hf, rows, cols, first, count);
}

}  // namespace

std::vector<UnitLayout> llama_units(const LlamaConfig& c, int tensor_rank, int expert_rank) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int T = int(c.tensor_parallel);
  FSDP_CHECK(T >= 1 && tensor_rank >= 0 && tensor_rank < T, "llama_units: tensor rank {} of {}", tensor_rank, T);
  FSDP_CHECK(c.expert_parallel >= 1 && expert_rank >= 0 && expert_rank < c.expert_parallel,
             "llama_units: expert rank {} of {}", expert_rank, c.expert_parallel);
  const Split rows{0, T, tensor_rank}, cols{1, T, tensor_rank};
  std::vector<UnitLayout> units;
  std::vector<UnitLayout> experts;  // expert units, one per block (expert parallelism only)

  UnitLayout emb;
  emb.name = "embedding";
  add(emb, "tok_embeddings", "model.embed_tokens.weight", {V, C}, true, 0, rows);
  units.push_back(std::move(emb));

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    UnitLayout b;
    b.name = "layers." + std::to_string(l);
    add(b, p + "wq", hf + "self_attn.q_proj.weight", {c.q_dim(), C}, true, 0, rows);
    add(b, p + "wk", hf + "self_attn.k_proj.weight", {c.kv_dim(), C}, true, 0, rows);
    add(b, p + "wv", hf + "self_attn.v_proj.weight", {c.kv_dim(), C}, true, 0, rows);
    add(b, p + "wo", hf + "self_attn.o_proj.weight", {C, c.q_dim()}, true, 0, cols);
    if (c.expert_units()) {
      UnitLayout x;
      x.name = b.name + ".experts";
      x.experts_of = block_unit(int(l));
      const int64_t n = c.local_experts();
      add_experts(b, x, c, p, hf, rows, cols, int64_t(expert_rank) * n, n);
      experts.push_back(std::move(x));
    } else if (c.is_moe()) {
      add_experts(b, b, c, p, hf, rows, cols, 0, c.num_experts);
    } else {
      add(b, p + "w_gate", hf + "mlp.gate_proj.weight", {F, C}, true, 0, rows);
      add(b, p + "w_up", hf + "mlp.up_proj.weight", {F, C}, true, 0, rows);
      add(b, p + "w_down", hf + "mlp.down_proj.weight", {C, F}, true, 0, cols);
    }
    add(b, p + "attn_norm", hf + "input_layernorm.weight", {C}, false, 1);
    add(b, p + "mlp_norm", hf + "post_attention_layernorm.weight", {C}, false, 1);
    units.push_back(std::move(b));
  }

  UnitLayout head;
  head.name = "head";
  if (c.tie_word_embeddings) {
    head.reads_unit = embedding_unit();  // lm_head is tok_embeddings
  } else {
    add(head, "lm_head", "lm_head.weight", {V, C}, true, 0, rows);
  }
  add(head, "norm", "model.norm.weight", {C}, false, 1);
  units.push_back(std::move(head));
  for (UnitLayout& x : experts) units.push_back(std::move(x));
  if (T > 1 || c.expert_units()) {
    // Every slot numbered as in one rank's layout (an expert unit's in its block's).
    LlamaConfig one = c;
    one.tensor_parallel = 1;
    one.expert_parallel = 1;
    const std::vector<UnitLayout> whole = llama_units(one);
    for (size_t u = 0; u < units.size(); ++u) {
      const UnitLayout& w = whole[size_t(units[u].experts_of >= 0 ? units[u].experts_of : int(u))];
      for (ParamSlot& s : units[u].params) s.whole_offset = w.slot(s.name).offset;
    }
  }
  return units;
}

}  // namespace fsdp::model
