// Loading a config: YAML text -> Config through the field table (schema.cpp), then the
// --set overrides, then one validation pass. Every failure is one ConfigError that names
// where the value came from ("file:line" or "--set text") and the key, so the CLI can print
// it and stop before any work is done.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "fsdp/config/config.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/regular_file.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/rope_scaling.h"
#include "fsdp/model/tensor_parallel.h"
#include "yaml_text.h"

namespace fsdp::config {
namespace {

using detail::Field;

// Where a key's value came from. `rank` orders origins by precedence (a later line, then
// the overrides in order) so a rule over two keys blames the one set last; -1 = default.
struct Origin {
  std::string where;
  long rank = -1;
};
using Origins = std::map<std::string, Origin, std::less<>>;
constexpr long kOverrideRank = 1'000'000'000;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ConfigError(where.empty() ? what : fmt::format("{}: {}", where, what));
}

std::string full_key(const Field& f) { return fmt::format("{}.{}", f.section, f.key); }

std::string at_line(const std::string& name, const YAML::Mark& mark) {
  return mark.line >= 0 ? fmt::format("{}:{}", name, mark.line + 1) : name;
}

std::string shown(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (!n.IsScalar()) return "an empty value";
  return fmt::format("'{}'", n.Scalar());
}

bool is_section(std::string_view name) {
  const auto list = detail::sections();
  return std::any_of(list.begin(), list.end(), [&](const auto& s) { return s.name == name; });
}

const Field* find_field(std::string_view section, std::string_view key) {
  for (const Field& f : detail::fields())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

// The closest candidate, if it is close enough to be a typo (core/cli_args.h).
std::string closest(std::string_view typo, const std::vector<std::string>& candidates) {
  return closest_match(typo, candidates);
}

std::string did_you_mean(const std::string& guess) {
  return guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess);
}

std::string unknown_section(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& s : detail::sections()) names.emplace_back(s.name);
  const std::string guess = closest(name, names);
  if (!guess.empty()) return fmt::format("unknown section '{}'{}", name, did_you_mean(guess));
  return fmt::format("unknown section '{}' (sections are {})", name, fmt::join(names, ", "));
}

std::string unknown_key(std::string_view section, std::string_view key) {
  std::vector<std::string> same_section;
  for (const Field& f : detail::fields())
    if (f.section == section) same_section.emplace_back(f.key);
  std::string guess = closest(key, same_section);
  if (!guess.empty()) guess = fmt::format("{}.{}", section, guess);
  for (const Field& f : detail::fields())  // the right key in the wrong section: train.lr
    if (guess.empty() && f.key == key) guess = full_key(f);
  return fmt::format("unknown key '{}.{}'{}", section, key, did_you_mean(guess));
}

// ---- The file -------------------------------------------------------------------------
void read_tree(const YAML::Node& root, const std::string& name, Config& cfg, Origins& origins) {
  if (!root.IsDefined() || root.IsNull()) return;  // empty file: all defaults
  if (!root.IsMap()) fail(at_line(name, root.Mark()), fmt::format("expected a map of sections, got {}", shown(root)));
  // yaml-cpp keeps both entries of a repeated key, so duplicates are found by their lines.
  std::map<std::string, int> section_lines;
  for (const auto& section_entry : root) {
    const YAML::Node& section_key = section_entry.first;
    const YAML::Node& section_value = section_entry.second;
    const std::string where = at_line(name, section_key.Mark());
    if (!section_key.IsScalar()) fail(where, fmt::format("expected a section name, got {}", shown(section_key)));
    const std::string& section = section_key.Scalar();
    if (!is_section(section)) fail(where, unknown_section(section));
    if (auto [it, fresh] = section_lines.emplace(section, section_key.Mark().line + 1); !fresh)
      fail(where, fmt::format("duplicate section '{}' (first at line {})", section, it->second));
    if (section_value.IsNull()) continue;  // `train:` with nothing under it
    if (!section_value.IsMap())
      fail(where, fmt::format("section '{}' expects a map of keys, got {}", section, shown(section_value)));

    std::map<std::string, int> key_lines;
    for (const auto& entry : section_value) {
      const YAML::Node& key_node = entry.first;
      const std::string key_where = at_line(name, key_node.Mark());
      if (!key_node.IsScalar()) fail(key_where, fmt::format("expected a key of '{}', got {}", section, shown(key_node)));
      const Field* field = find_field(section, key_node.Scalar());
      if (field == nullptr) fail(key_where, unknown_key(section, key_node.Scalar()));
      const std::string key = full_key(*field);
      if (auto [it, fresh] = key_lines.emplace(key, key_node.Mark().line + 1); !fresh)
        fail(key_where, fmt::format("duplicate key '{}' (first at line {})", key, it->second));
      if (std::string err = field->read(cfg, entry.second); !err.empty())
        fail(key_where, fmt::format("key '{}' {}", key, err));
      origins[key] = Origin{key_where, key_node.Mark().line + 1};
    }
  }
}

// ---- --set section.key=value -------------------------------------------------------------
void apply_override(const std::string& text, long index, Config& cfg, Origins& origins) {
  if (const size_t bad = detail::first_unprintable(text); bad != std::string::npos)
    fail("--set", fmt::format("byte 0x{:02x} at column {} is not printable UTF-8 text",
                              static_cast<unsigned char>(text[bad]), bad + 1));
  if (const size_t cr = text.find_first_of("\r\n"); cr != std::string::npos)
    fail("--set", fmt::format("a line break (byte 0x{:02x}) at column {}: a --set value is one line",
                              static_cast<unsigned char>(text[cr]), cr + 1));
  const std::string where = "--set " + text;
  const size_t eq = text.find('=');
  if (eq == std::string::npos) fail(where, "expected section.key=value, e.g. --set train.max_steps=5");
  const std::string path = text.substr(0, eq);
  const size_t dot = path.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size())
    fail(where, fmt::format("'{}' is not of the form section.key, e.g. --set train.max_steps=5", path));
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  if (!is_section(section)) fail(where, unknown_section(section));
  const Field* field = find_field(section, key);
  if (field == nullptr) fail(where, unknown_key(section, key));

  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail(where, fmt::format("key '{}': the value is not valid YAML ({})", path, e.msg));
  }
  if (std::string err = field->read(cfg, value); !err.empty()) fail(where, fmt::format("key '{}' {}", path, err));
  origins[path] = Origin{where, kOverrideRank + index};
}

// ---- Rules over the device and the resolved model shape ------------------------------------
// A float16 or bfloat16 compute dtype on the CPU. What the build and the machine can do
// (a CUDA backend, a visible GPU) is checked at start-up instead (train/setup.cpp's
// resolve_device, through fail_key), so that a GPU config still loads on a login node.
template <class Conflict>
void validate_device(const Config& cfg, const Conflict& conflict) {
  const TrainConfig& t = cfg.train;
  if (t.device == "cpu" && t.dtype != DType::F32)
    conflict("train.dtype",
             fmt::format("is {}, which needs train.device cuda: the CPU computes in float32 (fsdp.param_dtype: "
                         "bfloat16 still halves the all-gathers)",
                         dtype_name(t.dtype)),
             "train.device", fmt::format("is cpu, but train.dtype {} needs a GPU", dtype_name(t.dtype)));
}

// Without a model folder the shape is the preset with the keys on top, known now: every
// rule of the model (heads dividing the width, sizes within their bounds, ...) and
// train.seq_len within the context are config errors, blamed on the key set last.
template <class OriginOf>
void validate_shape(const Config& cfg, const OriginOf& origin) {
  if (!cfg.model.init_from.empty()) return;
  const model::LlamaConfig shape = apply_shape_keys(cfg.model, model::llama_preset(cfg.model.preset));
  auto last_set = [&](const std::vector<std::string>& keys) {
    std::string best = keys.front();
    for (const std::string& k : keys)
      if (origin(k).rank > origin(best).rank) best = k;
    return best;
  };
  const std::string preset = fmt::format(" (model.preset {} with the model keys set)", cfg.model.preset);
  if (const auto p = shape.problem()) {
    std::vector<std::string> keys;
    for (std::string_view k : p->keys) keys.push_back(fmt::format("model.{}", k));
    const std::string key = last_set(keys);
    fail(origin(key).where, fmt::format("key '{}': {}{}", key, p->message, preset));
  }
  if (cfg.train.seq_len > shape.max_seq_len) {
    const std::string key = last_set({"train.seq_len", "model.max_seq_len"});
    fail(origin(key).where, fmt::format("key '{}': train.seq_len {} exceeds the model's max_seq_len {}{}", key,
                                        cfg.train.seq_len, shape.max_seq_len, preset));
  }
  if (const auto why = model::tensor_parallel_problem(shape, cfg.parallel.tensor, cfg.train.seq_len))
    fail(origin("parallel.tensor").where, fmt::format("key 'parallel.tensor' {}{}", *why, preset));
}

// ---- The one validation pass ---------------------------------------------------------------
// The model's layer count when the config alone decides it: the override, else the preset's
// (none with model.init_from, whose config.json decides; none for an unknown preset, which
// its own row reports).
std::optional<int64_t> known_layers(const ModelConfig& m) {
  if (m.num_layers) return *m.num_layers;
  if (!m.init_from.empty()) return std::nullopt;
  for (const auto& p : model::llama_presets())
    if (p.name == m.preset) return p.config.num_layers;
  return std::nullopt;
}

// Likewise the expert count (0 = a dense MLP).
std::optional<int64_t> known_experts(const ModelConfig& m) {
  if (m.num_experts) return *m.num_experts;
  if (!m.init_from.empty()) return std::nullopt;
  for (const auto& p : model::llama_presets())
    if (p.name == m.preset) return p.config.num_experts;
  return std::nullopt;
}

// parallel.expert against the model (the world's side is the mesh's: dist::mesh_problem at
// start-up; what is not built yet, train::rank_model_config's).
template <class Conflict>
void validate_expert_parallel(const Config& cfg, const Conflict& conflict) {
  const int E = cfg.parallel.expert;
  if (E == 1) return;
  const ModelConfig& m = cfg.model;
  if (const std::optional<int64_t> experts = known_experts(m)) {
    if (*experts == 0)
      conflict("parallel.expert",
               fmt::format("is {}, which needs a mixture of experts (model.num_experts > 0): a dense model has no "
                           "experts to spread; set parallel.expert: 1",
                           E),
               "model.num_experts",
               fmt::format("is 0 (a dense model), but parallel.expert is {}: set parallel.expert: 1 or give the model "
                           "experts",
                           E));
    if (*experts % E != 0)
      conflict("parallel.expert",
               fmt::format("{} must divide model.num_experts ({}): every rank of the expert group holds the same "
                           "number of whole experts",
                           E, *experts),
               "model.num_experts",
               fmt::format("({}) must be a multiple of parallel.expert ({}): every rank of the expert group holds the "
                           "same number of whole experts",
                           *experts, E));
  }
}

void validate(const Config& cfg, const Origins& origins, const std::string& name) {
  auto origin = [&](const std::string& key) {
    const auto it = origins.find(key);
    return it != origins.end() ? it->second : Origin{name, -1};
  };
  for (const Field& f : detail::fields()) {
    if (std::string err = f.check(cfg); !err.empty()) {
      const std::string key = full_key(f);
      fail(origin(key).where, fmt::format("key '{}' {}", key, err));
    }
  }

  // Rules over two keys: blame the one set last (the other may be a default), with the
  // message written from its side.
  auto conflict = [&](const std::string& a, const std::string& a_message, const std::string& b,
                      const std::string& b_message) {
    const bool blame_a = origin(a).rank >= origin(b).rank;
    const std::string& key = blame_a ? a : b;
    fail(origin(key).where, fmt::format("key '{}' {}", key, blame_a ? a_message : b_message));
  };
  const ModelConfig& m = cfg.model;
  if (m.num_heads && m.num_kv_heads && *m.num_heads % *m.num_kv_heads != 0)
    conflict("model.num_kv_heads", fmt::format("must divide model.num_heads ({}), got {}", *m.num_heads, *m.num_kv_heads),
             "model.num_heads",
             fmt::format("must be a multiple of model.num_kv_heads ({}), got {}", *m.num_kv_heads, *m.num_heads));
  const auto k_range = [&] {
    return fmt::format("must be in [1, model.num_experts = {}], got {}", *m.num_experts, *m.experts_per_token);
  };
  if (m.num_experts && m.experts_per_token && *m.num_experts > 0 && *m.experts_per_token < 1)
    fail(origin("model.experts_per_token").where, "key 'model.experts_per_token' " + k_range());
  if (m.num_experts && m.experts_per_token && *m.num_experts > 0 && *m.experts_per_token > *m.num_experts)
    conflict("model.experts_per_token",
             k_range(), "model.num_experts",
             fmt::format("must be >= model.experts_per_token ({}), got {}", *m.experts_per_token, *m.num_experts));
  if (m.hidden_size && m.num_heads && *m.hidden_size % *m.num_heads != 0)
    conflict("model.num_heads", fmt::format("must divide model.hidden_size ({}), got {}", *m.hidden_size, *m.num_heads),
             "model.hidden_size",
             fmt::format("must be a multiple of model.num_heads ({}), got {}", *m.num_heads, *m.hidden_size));
  if (const std::optional<int64_t> experts = known_experts(m); experts && *experts == 0 && m.router_bias_update_rate > 0)
    conflict("model.router_bias_update_rate",
             fmt::format("is {}, which needs a mixture of experts (model.num_experts > 0): a dense model has no router "
                         "to balance",
                         m.router_bias_update_rate),
             "model.num_experts",
             fmt::format("is 0 (a dense model), but model.router_bias_update_rate is {}: set it to 0 or give the "
                         "model experts",
                         m.router_bias_update_rate));
  validate_expert_parallel(cfg, conflict);
  if (const std::optional<int64_t> experts = known_experts(m); experts && *experts == 0 && cfg.moe.capacity_factor > 0)
    conflict("moe.capacity_factor",
             fmt::format("is {}, which needs a mixture of experts (model.num_experts > 0): a dense model has no "
                         "experts to drop tokens from; set it to 0",
                         cfg.moe.capacity_factor),
             "model.num_experts",
             fmt::format("is 0 (a dense model), but moe.capacity_factor is {}: set it to 0 or give the model experts",
                         cfg.moe.capacity_factor));
  const OptimConfig& o = cfg.optim;
  if (o.min_lr > o.lr)
    conflict("optim.min_lr", fmt::format("must be <= optim.lr ({}), got {}", o.lr, o.min_lr), "optim.lr",
             fmt::format("must be >= optim.min_lr ({}), got {}", o.min_lr, o.lr));
  if (m.quantization != "none" && !cfg.lora.enabled)
    conflict("model.quantization", fmt::format("is '{}', which needs lora.enabled: true (a quantized base trains only "
                                               "through adapters)", m.quantization),
             "lora.enabled", fmt::format("must be true when model.quantization is '{}'", m.quantization));
  if (!cfg.lora.init_from.empty() && !cfg.lora.enabled)
    conflict("lora.init_from", "needs lora.enabled: true", "lora.enabled", "must be true when lora.init_from is set");
  const TrainConfig& t = cfg.train;
  if (t.activation_offload && t.activation_checkpointing == "none")
    conflict("train.activation_offload",
             "is true, which needs train.activation_checkpointing full or selective (offloading moves what a "
             "checkpointed block keeps), got none",
             "train.activation_checkpointing",
             "is none, but train.activation_offload is true: offloading moves what a checkpointed block keeps; set "
             "full or selective, or train.activation_offload: false");
  // The layer count is known here unless it comes from model.init_from's config.json
  // (then train/setup.cpp checks it once the folder is read).
  if (const std::optional<int64_t> layers = known_layers(m); layers && t.activation_checkpointing_every > *layers)
    conflict("train.activation_checkpointing_every",
             fmt::format("must be at most the model's {} layers, got {}", *layers, t.activation_checkpointing_every),
             "model.num_layers",
             fmt::format("must be at least train.activation_checkpointing_every ({}), got {}",
                         t.activation_checkpointing_every, *layers));
  // data.path is checked at start-up (train/setup.cpp), where a run needs it: `plan` and
  // the defaults need none.
  if (t.global_batch_size > 0 && t.global_batch_size % t.micro_batch_size != 0)
    conflict("train.global_batch_size",
             fmt::format("must be a multiple of train.micro_batch_size ({}), got {}", t.micro_batch_size,
                         t.global_batch_size),
             "train.micro_batch_size",
             fmt::format("must divide train.global_batch_size ({}), got {}", t.global_batch_size, t.micro_batch_size));
  validate_device(cfg, conflict);
  validate_shape(cfg, origin);
}

}  // namespace

Config load_config_string(const std::string& raw_text, const std::string& display_name,
                          const std::vector<std::string>& overrides) {
  const std::string yaml_text = detail::with_lf_line_breaks(raw_text);
  if (const size_t bad = detail::first_unprintable(yaml_text); bad != std::string::npos) {
    const detail::TextPosition at = detail::position_of(yaml_text, bad);
    fail(fmt::format("{}:{}", display_name, at.line),
         fmt::format("byte 0x{:02x} at column {} is not printable UTF-8 text, all a YAML file may hold",
                     static_cast<unsigned char>(yaml_text[bad]), at.column));
  }
  // A second document after '---' would otherwise be ignored without a word.
  if (const size_t line = detail::document_content_line(yaml_text, 2); line != 0) {
    fail(fmt::format("{}:{}", display_name, line),
         "a second YAML document (after '---'): a config is one document; merge the two, or put the second in a "
         "file of its own");
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(at_line(display_name, e.mark), fmt::format("invalid YAML: {}", e.msg));
  }
  // yaml-cpp 0.7 returns no document, without an error, for text that starts with a stray
  // flow separator (',') at the top level: the whole file would silently be the defaults.
  if (root.IsNull()) {
    if (const size_t line = detail::document_content_line(yaml_text, 1); line != 0)
      fail(fmt::format("{}:{}", display_name, line),
           "invalid YAML: no document could be read from here on (a ',' outside [ ] or { }?)");
  }
  Config cfg;
  Origins origins;
  read_tree(root, display_name, cfg, origins);
  for (size_t i = 0; i < overrides.size(); ++i) apply_override(overrides[i], static_cast<long>(i), cfg, origins);
  validate(cfg, origins, display_name);
  cfg.origins.file = display_name;
  for (const auto& [key, o] : origins) cfg.origins.where[key] = o.where;
  return cfg;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // A FIFO or /dev/zero as --config once blocked or read forever: regular files only.
  std::string why;
  const int fd = open_regular_file(path, why);
  if (fd < 0) throw ConfigError(fmt::format("{}: cannot open config file: {}", path, why));
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(fmt::format("{}: cannot read config file: {}", path, std::strerror(err)));
    }
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return load_config_string(text, path, overrides);
}

void validate(const Config& cfg) { validate(cfg, Origins{}, "config"); }

std::string dump_yaml(const Config& cfg) {
  std::string out;
  std::string_view section;
  for (const Field& f : detail::fields()) {
    if (f.section != section) out += fmt::format("{}:\n", section = f.section);
    out += fmt::format("  {}: {}\n", f.key, f.write(cfg));
  }
  return out;
}

uint64_t config_hash(const Config& cfg) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis and prime (64-bit)
  for (const char c : dump_yaml(cfg)) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// `text` as lines of at most `width` columns (a longer word stands alone), each indented.
static std::string wrapped(std::string_view text, size_t indent, size_t width) {
  std::string out, line(indent, ' ');
  size_t p = 0;
  while (p < text.size()) {
    const size_t q = std::min(text.find(' ', p), text.size());
    const std::string_view word = text.substr(p, q - p);
    if (line.size() > indent && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.assign(indent, ' ');
    }
    if (line.size() > indent) line += ' ';
    line += word;
    p = q + 1;
  }
  return out + line + "\n";
}

std::string describe_keys() {
  const Config defaults;
  std::string out = "Config keys (YAML `section:` then `key: value`; override any with --set section.key=value):\n";
  for (const auto& s : detail::sections()) {
    out += fmt::format("\n{}: {}\n", s.name, s.doc);
    for (const Field& f : detail::fields()) {
      if (f.section != s.name) continue;
      out += fmt::format("  {}.{} = {}  ({})\n{}", f.section, f.key, f.write(defaults), f.type, wrapped(f.doc, 6, 100));
    }
  }
  return out;
}

std::string checkpoint_dir(const Config& cfg) {
  if (!cfg.checkpoint.dir.empty()) return cfg.checkpoint.dir;
  return (std::filesystem::path(cfg.run.dir) / "checkpoints").string();
}

void fail_key(const Config& cfg, std::string_view key, const std::string& what) {
  const auto it = cfg.origins.where.find(key);
  fail(it != cfg.origins.where.end() ? it->second : cfg.origins.file, fmt::format("key '{}' {}", key, what));
}

// model.rope_* over the preset's or config.json's scaling: a type other than none starts
// from the factors already there (Llama 3.1's for its presets), which single keys override.
static void apply_rope_scaling(const config::ModelConfig& m, model::RopeScaling& s) {
  if (m.rope_scaling) s.type = model::rope_scaling_type(*m.rope_scaling);
  if (s.type == model::RopeScaling::Type::None) s = model::RopeScaling{};  // no factors to carry over
  if (m.rope_scaling_factor) s.factor = *m.rope_scaling_factor;
  if (m.rope_low_freq_factor) s.low_freq_factor = *m.rope_low_freq_factor;
  if (m.rope_high_freq_factor) s.high_freq_factor = *m.rope_high_freq_factor;
  if (m.rope_original_max_position_embeddings) s.original_max_position = *m.rope_original_max_position_embeddings;
  const bool factors_set = m.rope_scaling_factor || m.rope_low_freq_factor || m.rope_high_freq_factor ||
                           m.rope_original_max_position_embeddings;
  FSDP_CHECK(!factors_set || s.type != model::RopeScaling::Type::None,
             "model.rope_scaling_factor and the other model.rope_* factors need model.rope_scaling: linear or llama3 "
             "(the model has no RoPE scaling)");
}

model::LlamaConfig apply_shape_keys(const ModelConfig& m, model::LlamaConfig c) {
  auto set = [](const auto& key, auto& field) {
    if (key) field = *key;
  };
  set(m.vocab_size, c.vocab_size);
  set(m.hidden_size, c.hidden_size);
  set(m.intermediate_size, c.intermediate_size);
  set(m.num_layers, c.num_layers);
  set(m.num_heads, c.num_heads);
  set(m.num_kv_heads, c.num_kv_heads);
  set(m.max_seq_len, c.max_seq_len);
  set(m.rope_theta, c.rope_theta);
  set(m.norm_eps, c.norm_eps);
  set(m.num_experts, c.num_experts);
  set(m.experts_per_token, c.experts_per_token);
  set(m.router_aux_loss_coef, c.router_aux_loss_coef);
  set(m.router_z_loss_coef, c.router_z_loss_coef);
  // RoPE scaling is a training choice, not the folder's shape: fine-tuning a model to a
  // longer context with position interpolation (linear) or Llama 3.1's scaling is what
  // these keys are for. Tying is the shape (a tied folder has no lm_head to load).
  apply_rope_scaling(m, c.rope_scaling);
  set(m.tie_word_embeddings, c.tie_word_embeddings);
  return c;
}

std::string profile_dir(const Config& cfg) {
  if (!cfg.logging.profile_dir.empty()) return cfg.logging.profile_dir;
  return (std::filesystem::path(cfg.run.dir) / "traces").string();
}

}  // namespace fsdp::config
