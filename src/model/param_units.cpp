#include "fsdp/model/param_units.h"

#include "fsdp/core/error.h"

namespace fsdp::model {

const ParamSlot& UnitLayout::slot(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return p;
  FSDP_FAIL("unit '{}' has no parameter '{}'", name, n);
}

Tensor UnitLayout::view(const Tensor& flat, const std::string& n) const {
  const ParamSlot& s = slot(n);
  FSDP_CHECK(flat.dim() == 1 && flat.numel() >= numel, "flat buffer {} too small for unit '{}' ({} elements)",
             flat.str(), name, numel);
  return flat.narrow(0, s.offset, s.numel).reshape(s.shape);
}

namespace {

void add(UnitLayout& u, const std::string& name, const std::string& hf, Dims shape, bool decay, int init_kind) {
  ParamSlot s;
  s.name = name;
  s.hf_name = hf;
  s.shape = shape;
  s.offset = u.numel;
  s.numel = shape.numel();
  s.weight_decay = decay;
  s.init_kind = init_kind;
  u.numel += s.numel;
  u.params.push_back(std::move(s));
}

}  // namespace

std::vector<UnitLayout> llama_units(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  std::vector<UnitLayout> units;

  UnitLayout emb{"embedding", {}, 0};
  add(emb, "tok_embeddings", "model.embed_tokens.weight", {V, C}, true, 0);
  units.push_back(std::move(emb));

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    UnitLayout b{"layers." + std::to_string(l), {}, 0};
    add(b, p + "wq", hf + "self_attn.q_proj.weight", {c.q_dim(), C}, true, 0);
    add(b, p + "wk", hf + "self_attn.k_proj.weight", {c.kv_dim(), C}, true, 0);
    add(b, p + "wv", hf + "self_attn.v_proj.weight", {c.kv_dim(), C}, true, 0);
    add(b, p + "wo", hf + "self_attn.o_proj.weight", {C, c.q_dim()}, true, 0);
    add(b, p + "w_gate", hf + "mlp.gate_proj.weight", {F, C}, true, 0);
    add(b, p + "w_up", hf + "mlp.up_proj.weight", {F, C}, true, 0);
    add(b, p + "w_down", hf + "mlp.down_proj.weight", {C, F}, true, 0);
    add(b, p + "attn_norm", hf + "input_layernorm.weight", {C}, false, 1);
    add(b, p + "mlp_norm", hf + "post_attention_layernorm.weight", {C}, false, 1);
    units.push_back(std::move(b));
  }

  UnitLayout head{"head", {}, 0};
  add(head, "lm_head", "lm_head.weight", {V, C}, true, 0);
  add(head, "norm", "model.norm.weight", {C}, false, 1);
  units.push_back(std::move(head));
  return units;
}

}  // namespace fsdp::model
