#include "fsdp/ckpt/hf_import.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/regular_file.h"
#include "fsdp/model/rope_scaling.h"

namespace fsdp::ckpt {

namespace {

using nlohmann::json;

// config.json is read as strictly as the YAML config: every field the model uses must
// have its JSON type (an integer is a JSON integer: 96.5 is refused, not truncated) and lie
// in its range before any arithmetic runs on it (num_attention_heads 0 once divided by
// zero). Errors name the file and the key.
std::string json_kind(const json& v) {
  if (v.is_number_float()) return fmt::format("the number {}", v.dump());
  if (v.is_string()) return fmt::format("the string {}", v.dump());
  return std::string(v.is_array() ? "a list" : v.is_object() ? "an object" : v.type_name());
}

int64_t integer_field(const json& j, const std::string& key, const std::string& path, int64_t lo, int64_t hi,
                      std::optional<int64_t> fallback = std::nullopt) {
  if (!j.contains(key) || j[key].is_null()) {
    FSDP_CHECK(fallback.has_value(), "{}: missing '{}'", path, key);
    return *fallback;
  }
  const json& v = j[key];
  FSDP_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", path, key, json_kind(v));
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi);
  const int64_t x = too_big ? hi : v.get<int64_t>();
  FSDP_CHECK(!too_big && x >= lo && x <= hi, "{}: '{}' must be in [{}, {}], got {}", path, key, lo, hi, v.dump());
  return x;
}

double number_field(const json& j, const std::string& key, const std::string& path, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  FSDP_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", path, key, json_kind(v));
  return v.get<double>();
}

template <typename T>
T typed_field(const json& j, const std::string& key, const std::string& path, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean() : v.is_string();
  FSDP_CHECK(ok, "{}: '{}' must be {}, got {}", path, key, std::is_same_v<T, bool> ? "true or false" : "a string",
             json_kind(v));
  return v.get<T>();
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// What transformers 5's fused expert tensors hold, for the message of a shape mismatch.
std::string fused_layout_of(const std::string& name) {
  if (name.ends_with("gate_up_proj"))
    return "[num_local_experts, 2 x intermediate_size, hidden_size]: each expert's w1 rows, then its w3 rows";
  if (name.ends_with("down_proj")) return "[num_local_experts, hidden_size, intermediate_size]";
  return "[num_local_experts, hidden_size]";
}

void check_float(const TensorEntry& e, const std::string& name) {
  FSDP_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16" || e.dtype == "F64",
             "{}: tensor '{}' has unsupported dtype {} (F32, BF16, F16 or F64)", e.file, name, e.dtype);
}

}  // namespace

TensorEntry hf_source_of(const SafetensorsFolder& folder, const model::ParamSlot& p) {
  // The whole parameter: a tensor-parallel slot is a slice of it (load_hf_unit picks it out).
  const Dims shape = p.whole_shape();
  const int64_t whole_numel = shape.numel();
  if (!folder.contains(p.hf_name) && !p.hf_fused_name.empty() && folder.contains(p.hf_fused_name)) {
    TensorEntry e = folder.entry(p.hf_fused_name);
    check_float(e, p.hf_fused_name);
    // The whole shape, not only enough elements: [E, C, 2F] for [E, 2F, C], a router stored
    // [C, E], or 2E experts where config.json says E would each load and train wrong weights.
    const std::vector<int64_t> want(p.hf_fused_shape.begin(), p.hf_fused_shape.end());
    FSDP_CHECK(e.shape == want, "{}: tensor '{}' has shape {} but the model expects {} ({})", e.file,
               p.hf_fused_name, shape_string(e.shape), shape_string(want), fused_layout_of(p.hf_fused_name));
    FSDP_CHECK(p.hf_fused_offset + whole_numel <= e.numel(), "{}: tensor '{}' is too small for {}", e.file,
               p.hf_fused_name, p.name);
    const size_t es = safetensors_dtype_size(e.dtype);
    e.data += size_t(p.hf_fused_offset) * es;
    e.nbytes = size_t(whole_numel) * es;
    e.shape = std::vector<int64_t>(shape.begin(), shape.end());
    return e;
  }
  FSDP_CHECK(folder.contains(p.hf_name), "{}: missing tensor '{}' (needed for {}){}", folder.dir(), p.hf_name, p.name,
             p.hf_fused_name.empty() ? "" : fmt::format(", nor the fused '{}'", p.hf_fused_name));
  const TensorEntry& e = folder.entry(p.hf_name);
  FSDP_CHECK(!folder.contains(p.hf_name + ".quant_state.bitsandbytes__nf4"),
             "{}: tensor '{}' is a bitsandbytes 4-bit weight: a quantized base trains only through adapters (set "
             "lora.enabled: true and model.quantization: nf4)",
             e.file, p.hf_name);
  std::vector<int64_t> want(shape.begin(), shape.end());
  FSDP_CHECK(e.shape == want, "{}: tensor '{}' has shape {} but the model expects {}", e.file, p.hf_name,
             shape_string(e.shape), shape.str());
  check_float(e, p.hf_name);
  return e;
}

namespace {

// Mixtral's routing keys (transformers' MixtralConfig). The class default of
// router_aux_loss_coef is 0.001; Mixtral-8x7B's config.json says 0.02, so a missing key
// takes the class default, as transformers would.
void read_mixtral_routing(const json& j, const std::string& path, model::LlamaConfig& c) {
  using L = model::ShapeLimits;
  c.num_experts = integer_field(j, "num_local_experts", path, 1, L::num_experts);
  c.experts_per_token = integer_field(j, "num_experts_per_tok", path, 1, c.num_experts);
  c.router_aux_loss_coef = number_field(j, "router_aux_loss_coef", path, 0.001);
  const double jitter = number_field(j, "router_jitter_noise", path, 0.0);
  FSDP_CHECK(jitter == 0.0, "{}: router_jitter_noise {} is not supported (0 only: routing here is deterministic)",
             path, jitter);
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    const int64_t w = integer_field(j, "sliding_window", path, 1, std::numeric_limits<int64_t>::max());
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
    FSDP_CHECK(r.contains("original_max_position_embeddings"), "{}: rope_scaling has no original_max_position_embeddings",
               path);
    s.original_max_position =
        integer_field(r, "original_max_position_embeddings", path, 1, model::ShapeLimits::max_seq_len);
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
  std::error_code ec;
  FSDP_CHECK(std::filesystem::exists(path, ec), "cannot open {} (model.init_from must be a Hugging Face model folder)",
             path);
  const json j = json_file::read(path);  // "rope_theta": 1e400 is refused there, by the file and its place
  FSDP_CHECK(j.is_object(), "{}: expected a JSON object of model settings, got {}", path, json_kind(j));
  const std::string type = typed_field<std::string>(j, "model_type", path, "llama");
  FSDP_CHECK(type == "llama" || type == "mixtral", "{}: model_type '{}' is not supported (expected llama or mixtral)",
             path, type);
  const std::string act = typed_field<std::string>(j, "hidden_act", path, "silu");
  FSDP_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (silu only)", path, act);
  FSDP_CHECK(!typed_field(j, "attention_bias", path, false), "{}: attention_bias=true is not supported", path);
  FSDP_CHECK(!typed_field(j, "mlp_bias", path, false), "{}: mlp_bias=true is not supported", path);
  using L = model::ShapeLimits;
  model::LlamaConfig c;
  c.vocab_size = integer_field(j, "vocab_size", path, 1, L::vocab_size);
  c.hidden_size = integer_field(j, "hidden_size", path, 1, L::hidden_size);
  c.intermediate_size = integer_field(j, "intermediate_size", path, 1, L::intermediate_size);
  c.num_layers = integer_field(j, "num_hidden_layers", path, 1, L::num_layers);
  c.num_heads = integer_field(j, "num_attention_heads", path, 1, L::num_heads);
  c.num_kv_heads = integer_field(j, "num_key_value_heads", path, 1, L::num_heads, c.num_heads);
  c.max_seq_len = integer_field(j, "max_position_embeddings", path, 1, L::max_seq_len);
  c.rope_theta = number_field(j, "rope_theta", path, 10000.0);
  c.norm_eps = number_field(j, "rms_norm_eps", path, 1e-6);
  FSDP_CHECK(c.hidden_size % c.num_heads == 0, "{}: hidden_size {} is not divisible by num_attention_heads {}", path,
             c.hidden_size, c.num_heads);
  FSDP_CHECK(c.num_heads % c.num_kv_heads == 0, "{}: num_attention_heads {} is not divisible by num_key_value_heads {}",
             path, c.num_heads, c.num_kv_heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t head_dim = integer_field(j, "head_dim", path, 1, L::hidden_size);
    FSDP_CHECK(head_dim == c.hidden_size / c.num_heads,
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
    FSDP_FAIL("{}: a value has the wrong type: {}", (std::filesystem::path(folder) / "config.json").string(),
              json_file::words(e));
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
  for (const auto& p : unit.params) sources.push_back(hf_source_of(folder, p));
  std::vector<float> buf;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const model::ParamSlot& p = unit.params[i];
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    // Only the elements [lo, hi) of the slot: convert them via sub-entries, one per run of
    // the slot that is contiguous in the whole parameter (the whole slot, or a row of a
    // column slice under tensor parallelism: ParamSlot::whole_index).
    const size_t es = safetensors_dtype_size(sources[i].dtype);
    // Elements are counted in the stored tensor: a fused one holds this slot from hf_fused_offset.
    const int64_t stored_base = sources[i].name == p.hf_name ? 0 : p.hf_fused_offset;
    for (int64_t at = lo; at < hi;) {
      const int64_t local = at - p.offset;
      const int64_t run = p.tp.dim == 1 ? std::min(hi - at, p.shape[1] - local % p.shape[1]) : hi - at;
      TensorEntry part = sources[i];
      part.data += size_t(p.whole_index(local)) * es;
      part.nbytes = size_t(run) * es;
      part.shape = {run};
      read_finite_f32(part, sources[i].name, stored_base + p.whole_index(local), out + (at - begin));
      at += run;
    }
  }
  for (int64_t i = std::max(begin, unit.numel); i < end; ++i) out[i - begin] = 0.0f;
}

void read_finite_f32(const TensorEntry& part, const std::string& name, int64_t first_element, float* out) {
  read_as_f32(part, out);
  const int64_t n = part.numel();
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      if (bad++ == 0) first_bad = i;
    }
  }
  FSDP_CHECK(bad == 0,
             "{}: tensor '{}' holds {} non-finite value(s) (NaN or infinity), the first at element {} ({}): refusing "
             "to load it",
             part.file, name, bad, first_element + first_bad, out[first_bad]);
}

namespace {

// The number after `key` in `name` ("model.layers.12.mlp" with "layers." -> 12), or -1.
int64_t index_after(const std::string& name, const std::string& key) {
  const size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + key.size();
  int64_t n = 0;
  bool digits = false;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && n < (int64_t(1) << 40); ++i, digits = true)
    n = n * 10 + (name[i] - '0');
  return digits && i < name.size() && name[i] == '.' ? n : -1;
}

}  // namespace

void check_unused_tensors(const SafetensorsFolder& folder, const model::LlamaConfig& cfg) {
  std::set<std::string> used;
  for (const model::UnitLayout& u : model::llama_units(cfg)) {
    for (const model::ParamSlot& p : u.params) {
      used.insert(p.hf_name);
      if (!p.hf_fused_name.empty()) used.insert(p.hf_fused_name);
    }
  }
  std::vector<std::string> unused;
  for (const std::string& name : folder.names()) {
    if (used.count(name) != 0 || name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && cfg.tie_word_embeddings) continue;
    // A bitsandbytes weight's pieces: <weight>.absmax, <weight>.quant_state..., ...
    const auto before = used.lower_bound(name);
    if (before != used.begin() && name.starts_with(*std::prev(before) + ".")) continue;
    const int64_t layer = index_after(name, "layers.");
    FSDP_CHECK(layer < cfg.num_layers,
               "{}: tensor '{}' is of layer {}, but config.json says num_hidden_layers {}: the weights and config.json "
               "disagree (refusing to ignore the extra layers)",
               folder.file_of(name).path(), name, layer, cfg.num_layers);
    const int64_t expert = index_after(name, "experts.");
    FSDP_CHECK(expert < cfg.num_experts || !cfg.is_moe(),
               "{}: tensor '{}' is of expert {}, but config.json says num_local_experts {}: the weights and "
               "config.json disagree (refusing to ignore the extra experts)",
               folder.file_of(name).path(), name, expert, cfg.num_experts);
    unused.push_back(name);
  }
  if (unused.empty()) return;
  std::vector<std::string> shown(unused.begin(), unused.begin() + std::min<size_t>(unused.size(), 5));
  spdlog::warn("model folder {}: {} tensor(s) not used by this model ({}{}); is config.json the one these weights "
               "were saved with?",
               folder.dir(), unused.size(), fmt::join(shown, ", "), unused.size() > shown.size() ? ", ..." : "");
}

}  // namespace fsdp::ckpt
