#include "fsdp/ckpt/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"

namespace fsdp::ckpt {

namespace {

using nlohmann::json;

template <typename T>
T required(const json& j, const std::string& key, const std::string& path) {
  FSDP_CHECK(j.contains(key) && !j[key].is_null(), "{}: missing '{}'", path, key);
  try {
    return j[key].get<T>();
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: '{}' has the wrong type ({})", path, key, e.what());
  }
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_float(const TensorEntry& e, const std::string& name) {
  FSDP_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16" || e.dtype == "F64",
             "{}: tensor '{}' has unsupported dtype {} (F32, BF16, F16 or F64)", e.file, name, e.dtype);
}

}  // namespace

TensorEntry hf_source_of(const SafetensorsFolder& folder, const model::ParamSlot& p) {
  if (!folder.contains(p.hf_name) && !p.hf_fused_name.empty() && folder.contains(p.hf_fused_name)) {
    TensorEntry e = folder.entry(p.hf_fused_name);
    check_float(e, p.hf_fused_name);
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    FSDP_CHECK(!e.shape.empty() && p.hf_fused_offset + p.numel <= numel && numel % e.shape[0] == 0,
               "{}: tensor '{}' has shape {}, too small for {} ({} elements from {})", e.file, p.hf_fused_name,
               shape_string(e.shape), p.name, p.numel, p.hf_fused_offset);
    const size_t es = safetensors_dtype_size(e.dtype);
    e.data += size_t(p.hf_fused_offset) * es;
    e.nbytes = size_t(p.numel) * es;
    e.shape = std::vector<int64_t>(p.shape.begin(), p.shape.end());
    return e;
  }
  FSDP_CHECK(folder.contains(p.hf_name), "{}: missing tensor '{}' (needed for {}){}", folder.dir(), p.hf_name, p.name,
             p.hf_fused_name.empty() ? "" : fmt::format(", nor the fused '{}'", p.hf_fused_name));
  const TensorEntry& e = folder.entry(p.hf_name);
  FSDP_CHECK(!folder.contains(p.hf_name + ".quant_state.bitsandbytes__nf4"),
             "{}: tensor '{}' is a bitsandbytes 4-bit weight: a quantized base trains only through adapters (set "
             "lora.enabled: true and model.quantization: nf4)",
             e.file, p.hf_name);
  std::vector<int64_t> want(p.shape.begin(), p.shape.end());
  FSDP_CHECK(e.shape == want, "{}: tensor '{}' has shape {} but the model expects {}", e.file, p.hf_name,
             shape_string(e.shape), p.shape.str());
  check_float(e, p.hf_name);
  return e;
}

namespace {

// Mixtral's routing keys (transformers' MixtralConfig). The class default of
// router_aux_loss_coef is 0.001; Mixtral-8x7B's config.json says 0.02, so a missing key
// takes the class default, as transformers would.
void read_mixtral_routing(const json& j, const std::string& path, model::LlamaConfig& c) {
  c.num_experts = required<int64_t>(j, "num_local_experts", path);
  c.experts_per_token = required<int64_t>(j, "num_experts_per_tok", path);
  c.router_aux_loss_coef = j.value("router_aux_loss_coef", 0.001);
  FSDP_CHECK(j.value("router_jitter_noise", 0.0) == 0.0,
             "{}: router_jitter_noise {} is not supported (0 only: routing here is deterministic)", path,
             j.value("router_jitter_noise", 0.0));
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    const int64_t w = j["sliding_window"].get<int64_t>();
    FSDP_CHECK(w >= c.max_seq_len, "{}: sliding_window {} shorter than max_position_embeddings {} is not supported",
               path, w, c.max_seq_len);
  }
}

}  // namespace

model::LlamaConfig read_hf_llama_config(const std::string& folder) {
  const std::string path = (std::filesystem::path(folder) / "config.json").string();
  std::ifstream in(path);
  FSDP_CHECK(in.good(), "cannot open {} (model.init_from must be a Hugging Face model folder)", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  const std::string type = j.value("model_type", std::string("llama"));
  FSDP_CHECK(type == "llama" || type == "mixtral", "{}: model_type '{}' is not supported (expected llama or mixtral)",
             path, type);
  FSDP_CHECK(j.value("hidden_act", std::string("silu")) == "silu", "{}: hidden_act '{}' is not supported (silu only)",
             path, j.value("hidden_act", std::string()));
  FSDP_CHECK(!j.value("attention_bias", false), "{}: attention_bias=true is not supported", path);
  FSDP_CHECK(!j.value("mlp_bias", false), "{}: mlp_bias=true is not supported", path);
  FSDP_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), "{}: rope_scaling is not supported", path);
  model::LlamaConfig c;
  c.vocab_size = required<int64_t>(j, "vocab_size", path);
  c.hidden_size = required<int64_t>(j, "hidden_size", path);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", path);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", path);
  c.num_heads = required<int64_t>(j, "num_attention_heads", path);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? j["num_key_value_heads"].get<int64_t>()
                       : c.num_heads;
  c.max_seq_len = required<int64_t>(j, "max_position_embeddings", path);
  c.rope_theta = j.value("rope_theta", 10000.0);
  c.norm_eps = j.value("rms_norm_eps", 1e-6);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    FSDP_CHECK(j["head_dim"].get<int64_t>() == c.hidden_size / c.num_heads,
               "{}: head_dim {} differs from hidden_size / num_attention_heads = {}; not supported", path,
               j["head_dim"].get<int64_t>(), c.hidden_size / c.num_heads);
  }
  if (type == "mixtral") read_mixtral_routing(j, path, c);
  try {
    c.validate();
  } catch (const Error& e) {
    FSDP_FAIL("{}: {}", path, e.what());
  }
  return c;
}

void load_hf_unit(const SafetensorsFolder& folder, const model::UnitLayout& unit, const Tensor& flat, int64_t begin) {
  check_dtype(flat, DType::F32, "flat");
  check_contiguous(flat, "flat");
  FSDP_CHECK(flat.device().is_cpu(), "load_hf_unit: {} must be a CPU tensor", flat.str());
  const int64_t end = begin + flat.numel();
  float* out = flat.data<float>();
  // Validate every tensor of the unit first, so a bad folder fails before any copying.
  std::vector<TensorEntry> sources;
  for (const auto& p : unit.params) sources.push_back(hf_source_of(folder, p));
  std::vector<float> buf;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const model::ParamSlot& p = unit.params[i];
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    // Only the elements [lo, hi) of the slot: convert them via a sub-entry.
    TensorEntry part = sources[i];
    const size_t es = safetensors_dtype_size(part.dtype);
    part.data += size_t(lo - p.offset) * es;
    part.nbytes = size_t(hi - lo) * es;
    part.shape = {hi - lo};
    read_as_f32(part, out + (lo - begin));
  }
  for (int64_t i = std::max(begin, unit.numel); i < end; ++i) out[i - begin] = 0.0f;
}

}  // namespace fsdp::ckpt
