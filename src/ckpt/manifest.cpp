// manifest.json written and read side by side: each struct's to_json and from_json sit
// together (nlohmann's ADL hooks), so adding a field is one edit in one place. Keys are
// written sorted (nlohmann::json is an ordered map by key), as they always were.
//
// Note [Manifest schema]
// A manifest is read as strictly as a config: resume trusts it to say where every element
// lives, so a CRC-valid manifest that is malformed (world_size 0, strategy FOO, step 2^62,
// bytes 1e30, a file name with a '/') must fail to parse, which makes the checkpoint
// "broken": resume: auto skips it for the previous one, as for a CRC mismatch. Integers
// must be JSON integers in range (nlohmann would silently truncate 1e30 or 2.5), every
// model size within model::ShapeLimits, and the counts must agree with each other: the
// rank files are one per rank of a shard group and tensor rank (FULL_SHARD and
// SHARD_GRAD_OP: the world, HYBRID_SHARD and HYBRID_SHARD_ZERO2: shard_group_size x T, NO_SHARD: T), a step is at most INT32_MAX (train.max_steps
// is an int), every step consumed at least one sample and every sample at least one token.
#include "fsdp/ckpt/manifest.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/model/rope_scaling.h"

namespace fsdp {
namespace {

// j.at(key) as an integer in [lo, hi]; anything else is an fsdp::Error naming the key
// (parse_manifest adds the file).
template <typename T>
T integer_at(const nlohmann::json& j, const char* key, T lo, T hi) {
  const nlohmann::json& v = j.at(key);
  FSDP_CHECK(v.is_number_integer(), "'{}' must be an integer, got {}", key, v.dump());
  using Wide = __int128;  // holds every int64 and uint64 value: one comparison for both signs
  const Wide x = v.is_number_unsigned() ? Wide(v.get<uint64_t>()) : Wide(v.get<int64_t>());
  FSDP_CHECK(x >= Wide(lo) && x <= Wide(hi), "'{}' must be in [{}, {}], got {}", key, lo, hi, v.dump());
  return v.get<T>();
}

double number_at(const nlohmann::json& j, const char* key, double lo, double fallback) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j.at(key);
  FSDP_CHECK(v.is_number() && v.get<double>() >= lo, "'{}' must be a number >= {}, got {}", key, lo, v.dump());
  return v.get<double>();
}

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr int kMaxWorld = 1 << 20;

}  // namespace

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
  // Likewise RoPE scaling and tying only when in use.
  const RopeScaling& r = m.rope_scaling;
  if (r.type != RopeScaling::Type::None) {
    j["rope_scaling"] = {{"type", rope_scaling_name(r.type)},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position", r.original_max_position}};
  }
  if (m.tie_word_embeddings) j["tie_word_embeddings"] = true;
}

void from_json(const nlohmann::json& j, LlamaConfig& m) {
  using L = ShapeLimits;
  m.vocab_size = integer_at<int64_t>(j, "vocab_size", 1, L::vocab_size);
  m.hidden_size = integer_at<int64_t>(j, "hidden_size", 1, L::hidden_size);
  m.intermediate_size = integer_at<int64_t>(j, "intermediate_size", 1, L::intermediate_size);
  m.num_layers = integer_at<int64_t>(j, "num_layers", 1, L::num_layers);
  m.num_heads = integer_at<int64_t>(j, "num_heads", 1, L::num_heads);
  m.num_kv_heads = integer_at<int64_t>(j, "num_kv_heads", 1, L::num_heads);
  m.max_seq_len = integer_at<int64_t>(j, "max_seq_len", 1, L::max_seq_len);
  m.rope_theta = number_at(j, "rope_theta", 0, -1);
  m.norm_eps = number_at(j, "norm_eps", 0, -1);
  if (j.contains("num_experts")) m.num_experts = integer_at<int64_t>(j, "num_experts", 0, L::num_experts);
  if (j.contains("experts_per_token"))
    m.experts_per_token = integer_at<int64_t>(j, "experts_per_token", 0, L::num_experts);
  m.router_aux_loss_coef = number_at(j, "router_aux_loss_coef", 0, 0.0);
  m.router_z_loss_coef = number_at(j, "router_z_loss_coef", 0, 0.0);
  if (const auto r = j.find("rope_scaling"); r != j.end()) {
    FSDP_CHECK(r->is_object() && r->contains("type") && r->at("type").is_string(),
               "'rope_scaling' must be an object with a 'type' string, got {}", r->dump());
    m.rope_scaling.type = rope_scaling_type(r->at("type").get<std::string>());
    m.rope_scaling.factor = number_at(*r, "factor", 0, 1.0);
    m.rope_scaling.low_freq_factor = number_at(*r, "low_freq_factor", 0, 1.0);
    m.rope_scaling.high_freq_factor = number_at(*r, "high_freq_factor", 0, 4.0);
    m.rope_scaling.original_max_position = integer_at<int64_t>(*r, "original_max_position", 1, L::max_seq_len);
  }
  if (const auto t = j.find("tie_word_embeddings"); t != j.end()) {
    FSDP_CHECK(t->is_boolean(), "'tie_word_embeddings' must be true or false, got {}", t->dump());
    m.tie_word_embeddings = t->get<bool>();
  }
  if (const auto p = m.problem()) FSDP_FAIL("model: {}", p->message);
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
  // Only a run that balances its experts has them, so every other manifest is unchanged.
  // Each float32 is written as its exact double, which reads back to the same bits.
  if (!s.router_bias.empty()) j["router_bias"] = s.router_bias;
}

void from_json(const json& j, TrainState& s) {
  s.step = integer_at<int64_t>(j, "step", 0, std::numeric_limits<int32_t>::max());
  s.samples_seen = integer_at<int64_t>(j, "samples_seen", s.step, kMaxInt64);
  s.tokens_seen = integer_at<int64_t>(j, "tokens_seen", s.samples_seen, kMaxInt64);
  s.train_seed = integer_at<uint64_t>(j, "train_seed", 0, std::numeric_limits<uint64_t>::max());
  s.data_seed = integer_at<uint64_t>(j, "data_seed", 0, std::numeric_limits<uint64_t>::max());
  // Absent from manifests written before float16 loss scaling existed.
  s.loss_scale = number_at(j, "loss_scale", 0, 0.0);
  if (j.contains("loss_scale_good_steps")) s.loss_scale_good_steps = integer_at<int64_t>(j, "loss_scale_good_steps", 0, s.step);
  if (j.contains("skipped_steps")) s.skipped_steps = integer_at<int64_t>(j, "skipped_steps", 0, s.step);
  // Their shape is checked against the model by Manifest's from_json.
  if (const auto b = j.find("router_bias"); b != j.end()) {
    FSDP_CHECK(b->is_array(), "'router_bias' must be a list of layers, got {}", b->dump());
    for (const json& layer : *b) {
      FSDP_CHECK(layer.is_array(), "'router_bias' must hold one list of numbers per layer, got {}", layer.dump());
      std::vector<float>& row = s.router_bias.emplace_back();
      for (const json& v : layer) {
        FSDP_CHECK(v.is_number() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) <= 3.4e38,
                   "'router_bias' values must be finite float32 numbers, got {}", v.dump());
        row.push_back(v.get<float>());
      }
    }
  }
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
  // A plain name in the checkpoint directory: a manifest must not send the reader elsewhere.
  FSDP_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..",
             "file name '{}' is not a plain file name", f.name);
  f.bytes = integer_at<uint64_t>(j, "bytes", 0, uint64_t(1) << 53);  // RankWriteStatus carries it in a double
  f.crc32 = integer_at<uint32_t>(j, "crc32", 0, std::numeric_limits<uint32_t>::max());
}

// The tensor rank only under tensor parallelism, so a version 1 manifest is what it was.
void to_json(json& j, const ManifestPiece& p) {
  j = {{"file", p.file}, {"begin", p.begin}, {"extent", p.extent}};
  if (p.tensor_rank != 0) j["tensor_rank"] = p.tensor_rank;
  if (!p.tensor.empty()) j["tensor"] = p.tensor;  // expert parallelism only (format version 3)
}

void from_json(const json& j, ManifestPiece& p) {
  p.file = integer_at<int>(j, "file", 0, kMaxWorld);
  p.begin = integer_at<int64_t>(j, "begin", 0, kMaxInt64);
  p.extent = integer_at<int64_t>(j, "extent", 0, kMaxInt64);
  if (j.contains("tensor_rank")) p.tensor_rank = integer_at<int>(j, "tensor_rank", 0, kMaxWorld);
  if (j.contains("tensor")) {
    p.tensor = j.at("tensor").get<std::string>();
    FSDP_CHECK(!p.tensor.empty() && p.tensor.size() <= 256, "a piece's 'tensor' must be a name of 1 to 256 characters");
  }
}

void to_json(json& j, const ManifestSlot& s) {
  j = {{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}, {"split", s.split}};
}

void from_json(const json& j, ManifestSlot& s) {
  s.name = j.at("name").get<std::string>();
  const json& shape = j.at("shape");
  FSDP_CHECK(shape.is_array() && !shape.empty() && shape.size() <= 2, "slot '{}': 'shape' must be 1 or 2 sizes, got {}",
             s.name, shape.dump());
  s.shape.clear();
  for (const json& d : shape) {
    FSDP_CHECK(d.is_number_integer() && d.get<int64_t>() >= 1 && d.get<int64_t>() <= (int64_t(1) << 40),
               "slot '{}': a size must be an integer in [1, 2^40], got {}", s.name, d.dump());
    s.shape.push_back(d.get<int64_t>());
  }
  s.offset = integer_at<int64_t>(j, "offset", 0, kMaxInt64);
  s.split = integer_at<int>(j, "split", -1, int(s.shape.size()) - 1);
}

void to_json(json& j, const ManifestUnit& u) {
  j = {{"name", u.name}, {"numel", u.numel}, {"pieces", u.pieces}};
  if (!u.slots.empty()) j["slots"] = u.slots;
}

void from_json(const json& j, ManifestUnit& u) {
  u.name = j.at("name").get<std::string>();
  u.numel = integer_at<int64_t>(j, "numel", 0, kMaxInt64);
  u.pieces = j.at("pieces").get<std::vector<ManifestPiece>>();
  if (j.contains("slots")) u.slots = j.at("slots").get<std::vector<ManifestSlot>>();
  int64_t next = 0;
  for (const ManifestSlot& s : u.slots) {
    const int64_t n = s.shape.size() == 1 ? s.shape[0] : s.shape[0] * s.shape[1];
    FSDP_CHECK(s.offset == next && n <= u.numel - next, "unit {}: slot '{}' at {} does not follow the one before (at {})",
               u.name, s.name, s.offset, next);
    next += n;
  }
  FSDP_CHECK(u.slots.empty() || next == u.numel, "unit {}: its slots hold {} of its {} elements", u.name, next, u.numel);
}

void to_json(json& j, const Manifest& m) {
  j = {{"format", kCheckpointFormat},
       {"format_version", m.format_version},
       {"run_id", m.run_id},
       {"state", m.state},
       {"model", m.model},
       {"strategy", m.strategy},
       {"world_size", m.world_size},
       {"shard_group_size", m.shard_group_size},
       {"files", m.files},
       {"units", m.units},
       {"config", m.config_yaml}};
  if (m.base) j["base"] = *m.base;  // only a LoRA run has one
  if (m.tensor_parallel > 1) j["tensor_parallel"] = m.tensor_parallel;
}

// The strategies config::to_string spells (fsdp/sharding_strategy.h; ckpt sits below fsdp).
bool known_strategy(const std::string& s) {
  return s == "FULL_SHARD" || s == "SHARD_GRAD_OP" || s == "NO_SHARD" || s == "HYBRID_SHARD" ||
         s == "HYBRID_SHARD_ZERO2";
}

void from_json(const json& j, Manifest& m) {
  m.format_version = j.at("format_version").get<int>();
  m.run_id = j.value("run_id", std::string());
  FSDP_CHECK(m.run_id.empty() || is_valid_run_id(m.run_id), "run_id '{}' is not a run id", m.run_id);
  m.state = j.at("state").get<TrainState>();
  m.model = j.at("model").get<model::LlamaConfig>();
  if (!m.state.router_bias.empty()) {
    FSDP_CHECK(m.model.is_moe() && int64_t(m.state.router_bias.size()) == m.model.num_layers,
               "'router_bias' holds {} layers, but the model has {} {}", m.state.router_bias.size(),
               m.model.num_layers, m.model.is_moe() ? "MoE layers" : "dense layers (no router)");
    for (const auto& row : m.state.router_bias)
      FSDP_CHECK(int64_t(row.size()) == m.model.num_experts, "'router_bias' has a layer of {} values for {} experts",
                 row.size(), m.model.num_experts);
  }
  m.strategy = j.at("strategy").get<std::string>();
  FSDP_CHECK(known_strategy(m.strategy),
             "strategy '{}' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2",
             m.strategy);
  m.world_size = integer_at<int>(j, "world_size", 1, kMaxWorld);
  m.shard_group_size = integer_at<int>(j, "shard_group_size", 1, m.world_size);
  if (j.contains("tensor_parallel")) {
    FSDP_CHECK(m.format_version >= 2, "'tensor_parallel' needs format_version 2, got {}", m.format_version);
    m.tensor_parallel = integer_at<int>(j, "tensor_parallel", 1, m.world_size);
  }
  const int T = m.tensor_parallel;
  FSDP_CHECK(m.world_size % (int64_t(m.shard_group_size) * T) == 0,
             "shard_group_size {} x tensor_parallel {} does not divide world_size {}", m.shard_group_size, T,
             m.world_size);
  const bool whole_world = m.strategy == "FULL_SHARD" || m.strategy == "SHARD_GRAD_OP";
  FSDP_CHECK(!whole_world || m.shard_group_size * T == m.world_size,
             "strategy {} shards over every data-parallel rank, but shard_group_size {}{} differs from world_size {}",
             m.strategy, m.shard_group_size, T > 1 ? fmt::format(" x tensor_parallel {}", T) : std::string(),
             m.world_size);
  FSDP_CHECK(m.strategy != "NO_SHARD" || m.shard_group_size == 1, "strategy NO_SHARD with shard_group_size {}",
             m.shard_group_size);
  m.config_yaml = j.value("config", std::string());
  m.files = j.at("files").get<std::vector<ManifestFile>>();
  // One file per rank of a shard group and tensor rank: replicas are not written twice
  // (checkpoint_writer.h).
  FSDP_CHECK(int(m.files.size()) == m.shard_group_size * T,
             "{} rank files listed, but a {} checkpoint of {} rank(s) (shard group {}, tensor parallel {}) has {}",
             m.files.size(), m.strategy, m.world_size, m.shard_group_size, T, m.shard_group_size * T);
  m.units = j.at("units").get<std::vector<ManifestUnit>>();
  for (const ManifestUnit& u : m.units) {
    FSDP_CHECK(T == 1 || !u.slots.empty() || u.numel == 0, "unit {}: a tensor-parallel checkpoint lists its slots",
               u.name);
    for (const ManifestPiece& p : u.pieces) {
      FSDP_CHECK(p.tensor_rank < T, "unit {}: a piece of tensor rank {} in a checkpoint of tensor_parallel {}", u.name,
                 p.tensor_rank, T);
      FSDP_CHECK(p.tensor.empty() || m.format_version >= 3, "unit {}: a named piece needs format_version 3, got {}",
                 u.name, m.format_version);
    }
  }
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
  const json j = json_file::parse(text, path);
  try {
    FSDP_CHECK(has_our_format(j), "{}: not an fsdp_train checkpoint manifest", path);
    const int version = j.at("format_version").get<int>();
    FSDP_CHECK(version >= 1 && version <= kCheckpointFormatVersion,
               "{}: format_version {} was written by a newer fsdp_train; this build reads versions up to {}", path,
               version, kCheckpointFormatVersion);
    return j.get<Manifest>();
  } catch (const json::exception& e) {
    // A missing key or a value of another type, in words ("key 'model' not found").
    FSDP_FAIL("{}: malformed manifest: {}", path, json_file::words(e));
  } catch (const Error& e) {
    FSDP_FAIL("{}: malformed manifest: {}", path, e.what());
  }
}

bool is_valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
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
