// manifest.json written and read side by side: each struct's to_json and from_json sit
// together (nlohmann's ADL hooks), so adding a field is one edit in one place. Keys are
// written sorted (nlohmann::json is an ordered map by key), as they always were.
#include "fsdp/ckpt/manifest.h"

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"

namespace fsdp {
namespace model {

// In the model's namespace for ADL. Routing keys only for a mixture of experts, so a dense
// model's manifest is what it always was.
void to_json(nlohmann::json& j, const LlamaConfig& m) {
  j = {{"vocab_size", m.vocab_size},   {"hidden_size", m.hidden_size}, {"intermediate_size", m.intermediate_size},
       {"num_layers", m.num_layers},   {"num_heads", m.num_heads},     {"num_kv_heads", m.num_kv_heads},
       {"max_seq_len", m.max_seq_len}, {"rope_theta", m.rope_theta},   {"norm_eps", m.norm_eps}};
  if (m.is_moe()) {
    j["num_experts"] = m.num_experts;
    j["experts_per_token"] = m.experts_per_token;
    j["router_aux_loss_coef"] = m.router_aux_loss_coef;
    j["router_z_loss_coef"] = m.router_z_loss_coef;
  }
}

void from_json(const nlohmann::json& j, LlamaConfig& m) {
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.hidden_size = j.at("hidden_size").get<int64_t>();
  m.intermediate_size = j.at("intermediate_size").get<int64_t>();
  m.num_layers = j.at("num_layers").get<int64_t>();
  m.num_heads = j.at("num_heads").get<int64_t>();
  m.num_kv_heads = j.at("num_kv_heads").get<int64_t>();
  m.max_seq_len = j.at("max_seq_len").get<int64_t>();
  m.rope_theta = j.at("rope_theta").get<double>();
  m.norm_eps = j.at("norm_eps").get<double>();
  m.num_experts = j.value("num_experts", int64_t{0});
  m.experts_per_token = j.value("experts_per_token", int64_t{0});
  m.router_aux_loss_coef = j.value("router_aux_loss_coef", 0.0);
  m.router_z_loss_coef = j.value("router_z_loss_coef", 0.0);
}

}  // namespace model

namespace ckpt {

using nlohmann::json;

void to_json(json& j, const TrainState& s) {
  j = {{"step", s.step},
       {"tokens_seen", s.tokens_seen},
       {"samples_seen", s.samples_seen},
       {"train_seed", s.train_seed},
       {"data_seed", s.data_seed},
       {"loss_scale", s.loss_scale},
       {"loss_scale_good_steps", s.loss_scale_good_steps},
       {"skipped_steps", s.skipped_steps}};
}

void from_json(const json& j, TrainState& s) {
  s.step = j.at("step").get<int64_t>();
  s.tokens_seen = j.at("tokens_seen").get<int64_t>();
  s.samples_seen = j.at("samples_seen").get<int64_t>();
  s.train_seed = j.at("train_seed").get<uint64_t>();
  s.data_seed = j.at("data_seed").get<uint64_t>();
  // Absent from manifests written before float16 loss scaling existed.
  s.loss_scale = j.value("loss_scale", 0.0);
  s.loss_scale_good_steps = j.value("loss_scale_good_steps", int64_t{0});
  s.skipped_steps = j.value("skipped_steps", int64_t{0});
}

void to_json(json& j, const BaseReference& b) {
  j = {{"path", b.path}, {"quantization", b.quantization}, {"crc32", b.crc32}, {"bytes", b.bytes}};
}

void from_json(const json& j, BaseReference& b) {
  b.path = j.at("path").get<std::string>();
  b.quantization = j.at("quantization").get<std::string>();
  b.crc32 = j.at("crc32").get<uint32_t>();
  b.bytes = j.at("bytes").get<uint64_t>();
}

void to_json(json& j, const ManifestFile& f) { j = {{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}}; }

void from_json(const json& j, ManifestFile& f) {
  f.name = j.at("name").get<std::string>();
  f.bytes = j.at("bytes").get<uint64_t>();
  f.crc32 = j.at("crc32").get<uint32_t>();
}

void to_json(json& j, const ManifestPiece& p) { j = {{"file", p.file}, {"begin", p.begin}, {"extent", p.extent}}; }

void from_json(const json& j, ManifestPiece& p) {
  p.file = j.at("file").get<int>();
  p.begin = j.at("begin").get<int64_t>();
  p.extent = j.at("extent").get<int64_t>();
}

void to_json(json& j, const ManifestUnit& u) { j = {{"name", u.name}, {"numel", u.numel}, {"pieces", u.pieces}}; }

void from_json(const json& j, ManifestUnit& u) {
  u.name = j.at("name").get<std::string>();
  u.numel = j.at("numel").get<int64_t>();
  u.pieces = j.at("pieces").get<std::vector<ManifestPiece>>();
}

void to_json(json& j, const Manifest& m) {
  j = {{"format", kCheckpointFormat},
       {"format_version", m.format_version},
       {"state", m.state},
       {"model", m.model},
       {"strategy", m.strategy},
       {"world_size", m.world_size},
       {"shard_group_size", m.shard_group_size},
       {"files", m.files},
       {"units", m.units},
       {"config", m.config_yaml}};
  if (m.base) j["base"] = *m.base;  // only a LoRA run has one
}

void from_json(const json& j, Manifest& m) {
  m.format_version = j.at("format_version").get<int>();
  m.state = j.at("state").get<TrainState>();
  m.model = j.at("model").get<model::LlamaConfig>();
  m.strategy = j.at("strategy").get<std::string>();
  m.world_size = j.at("world_size").get<int>();
  m.shard_group_size = j.at("shard_group_size").get<int>();
  m.config_yaml = j.value("config", std::string());
  m.files = j.at("files").get<std::vector<ManifestFile>>();
  m.units = j.at("units").get<std::vector<ManifestUnit>>();
  if (j.contains("base")) m.base = j.at("base").get<BaseReference>();
}

namespace {

// The one check that a JSON document is ours, for parse_manifest and is_manifest_text.
// Throws json::type_error when `j` is not an object.
bool has_our_format(const json& j) { return j.value("format", std::string()) == kCheckpointFormat; }

}  // namespace

std::string checkpoint_name(int64_t step) { return "step_" + std::to_string(step); }

std::string state_tensor_name(const std::string& unit, std::string_view kind) { return unit + "." + std::string(kind); }

std::string manifest_json(const Manifest& m) { return json(m).dump(1); }

Manifest parse_manifest(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  try {
    FSDP_CHECK(has_our_format(j), "{}: not an fsdp_train checkpoint manifest", path);
    const int version = j.at("format_version").get<int>();
    FSDP_CHECK(version >= 1 && version <= kCheckpointFormatVersion,
               "{}: format_version {} was written by a newer fsdp_train; this build reads versions up to {}", path,
               version, kCheckpointFormatVersion);
    return j.get<Manifest>();
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: malformed manifest: {}", path, e.what());
  }
}

bool is_manifest_text(const std::string& text) {
  try {
    return has_our_format(json::parse(text));
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace ckpt
}  // namespace fsdp
