#include "fsdp/ckpt/hf_import.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/model/rope_scaling.h"

namespace fsdp::ckpt {

namespace {

using nlohmann::json;

// An integer field: a JSON integer that fits int64. nlohmann converts a float (96.5, or an
// integer too long for 64 bits, which it parses as 1.1e22) to int64 by a cast, truncating
// or undefined (found by tests/fuzz/fuzz_hf_config_json.cpp).
int64_t integer(const json& v, const std::string& key, const std::string& path) {
  FSDP_CHECK(v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX)),
             "{}: '{}' must be an integer, got {}", path, key, v.dump());
  return v.get<int64_t>();
}

template <typename T>
T required(const json& j, const std::string& key, const std::string& path) {
  FSDP_CHECK(j.contains(key) && !j[key].is_null(), "{}: missing '{}'", path, key);
  if constexpr (std::is_same_v<T, int64_t>) return integer(j[key], key, path);
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

// Where a slot's values are in the folder: its own tensor, or (an expert's weight in
// transformers 5's layout) its range of a fused tensor. The entry returned covers exactly
// the slot's elements.
TensorEntry source_of(const SafetensorsFolder& folder, const model::ParamSlot& p) {
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
  std::vector<int64_t> want(p.shape.begin(), p.shape.end());
  FSDP_CHECK(e.shape == want, "{}: tensor '{}' has shape {} but the model expects {}", e.file, p.hf_name,
             shape_string(e.shape), p.shape.str());
  check_float(e, p.hf_name);
  return e;
}

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
    const int64_t w = integer(j["sliding_window"], "sliding_window", path);
    FSDP_CHECK(w >= c.max_seq_len, "{}: sliding_window {} shorter than max_position_embeddings {} is not supported",
               path, w, c.max_seq_len);
  }
}

// A number or integer field of rope_scaling, typed as transformers writes it.
double rope_number(const json& r, const char* key, const std::string& path) {
  const auto it = r.find(key);
  FSDP_CHECK(it != r.end() && it->is_number(), "{}: rope_scaling.{} must be a number, got {}", path, key,
             it == r.end() ? "nothing" : it->dump());
  return it->get<double>();
}

// config.json's rope_scaling (transformers 4.x): {"rope_type" (or the older "type"): "linear"
// | "llama3" | "default", "factor": f, and for llama3 "low_freq_factor", "high_freq_factor",
// "original_max_position_embeddings"}. Other types are refused by name.
model::RopeScaling read_rope_scaling(const json& j, const std::string& path) {
  model::RopeScaling s;
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return s;
  const json& r = *it;
  FSDP_CHECK(r.is_object(), "{}: rope_scaling must be an object or null, got {}", path, r.dump());
  const auto type = r.contains("rope_type") ? r.find("rope_type") : r.find("type");
  FSDP_CHECK(type != r.end() && type->is_string(), "{}: rope_scaling has no rope_type string", path);
  const std::string name = type->get<std::string>();
  if (name == "default") return s;  // transformers' name for unscaled RoPE
  try {
    s.type = model::rope_scaling_type(name);
  } catch (const Error& e) {
    FSDP_FAIL("{}: {}", path, e.what());
  }
  s.factor = rope_number(r, "factor", path);
  if (s.type == model::RopeScaling::Type::Llama3) {
    s.low_freq_factor = rope_number(r, "low_freq_factor", path);
    s.high_freq_factor = rope_number(r, "high_freq_factor", path);
    const auto orig = r.find("original_max_position_embeddings");
    FSDP_CHECK(orig != r.end(), "{}: rope_scaling has no original_max_position_embeddings", path);
    s.original_max_position = integer(*orig, "rope_scaling.original_max_position_embeddings", path);
  }
  return s;
}

// tie_word_embeddings: transformers' default is false for Llama and Mixtral.
bool read_tie_word_embeddings(const json& j, const std::string& path) {
  const auto it = j.find("tie_word_embeddings");
  if (it == j.end() || it->is_null()) return false;
  FSDP_CHECK(it->is_boolean(), "{}: tie_word_embeddings must be true or false, got {}", path, it->dump());
  return it->get<bool>();
}

}  // namespace

static model::LlamaConfig parse_hf_llama_config(const std::string& folder) {
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
  model::LlamaConfig c;
  c.vocab_size = required<int64_t>(j, "vocab_size", path);
  c.hidden_size = required<int64_t>(j, "hidden_size", path);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", path);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", path);
  c.num_heads = required<int64_t>(j, "num_attention_heads", path);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? integer(j["num_key_value_heads"], "num_key_value_heads", path)
                       : c.num_heads;
  c.max_seq_len = required<int64_t>(j, "max_position_embeddings", path);
  c.rope_theta = j.value("rope_theta", 10000.0);
  c.norm_eps = j.value("rms_norm_eps", 1e-6);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t head_dim = integer(j["head_dim"], "head_dim", path);
    // num_heads <= 0 is validate()'s to refuse (below), after which nothing divides by it.
    FSDP_CHECK(c.num_heads <= 0 || head_dim == c.hidden_size / c.num_heads,
               "{}: head_dim {} differs from hidden_size / num_attention_heads = {}; not supported", path, head_dim,
               c.hidden_size / c.num_heads);
  }
  c.rope_scaling = read_rope_scaling(j, path);
  FSDP_CHECK(type != "mixtral" || c.rope_scaling.type == model::RopeScaling::Type::None,
             "{}: rope_scaling in a Mixtral config is not supported: transformers 4.x's MixtralForCausalLM ignores it, "
             "so its logits would not be this model's",
             path);
  c.tie_word_embeddings = read_tie_word_embeddings(j, path);
  if (type == "mixtral") read_mixtral_routing(j, path, c);
  try {
    c.validate();
  } catch (const Error& e) {
    FSDP_FAIL("{}: {}", path, e.what());
  }
  return c;
}

model::LlamaConfig read_hf_llama_config(const std::string& folder) {
  // A value of the wrong JSON type (a number where the object or a string belongs, ...)
  // throws nlohmann's own exception from any line above, which no caller turns into one
  // line naming the file (found by tests/fuzz/fuzz_hf_config_json.cpp).
  try {
    return parse_hf_llama_config(folder);
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: a value has the wrong type: {}", (std::filesystem::path(folder) / "config.json").string(), e.what());
  }
}

void load_hf_unit(const SafetensorsFolder& folder, const model::UnitLayout& unit, const Tensor& flat, int64_t begin) {
  check_dtype(flat, DType::F32, "flat");
  check_contiguous(flat, "flat");
  FSDP_CHECK(flat.device().is_cpu(), "load_hf_unit: {} must be a CPU tensor", flat.str());
  const int64_t end = begin + flat.numel();
  float* out = flat.data<float>();
  // Validate every tensor of the unit first, so a bad folder fails before any copying.
  std::vector<TensorEntry> sources;
  for (const auto& p : unit.params) sources.push_back(source_of(folder, p));
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
