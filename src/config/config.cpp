// Loading a config: YAML text -> Config through the field table (schema.cpp), then the
// --set overrides, then one validation pass. Every failure is one ConfigError that names
// where the value came from ("file:line" or "--set text") and the key, so the CLI can print
// it and stop before any work is done.
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

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, so that
// "trian" is one edit from "train".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The closest candidate, if it is close enough to be a typo: at most 2 edits, and at
// most a third of the word so that short words do not "match" everything.
std::string closest(std::string_view typo, const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>(typo.size() / 3, 1, 2);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t dist = edit_distance(typo, c);
    if (dist < best_distance) best = c, best_distance = dist;
  }
  return best;
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

// ---- The one validation pass ---------------------------------------------------------------
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
  if (cfg.data.source == DataSource::Shards && cfg.data.path.empty())
    conflict("data.source", "is 'shards', which needs data.path (the folder of token shards)", "data.path",
             "must not be empty when data.source is 'shards'");
}

}  // namespace

Config load_config_string(const std::string& yaml_text, const std::string& display_name,
                          const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(at_line(display_name, e.mark), fmt::format("invalid YAML: {}", e.msg));
  }
  Config cfg;
  Origins origins;
  read_tree(root, display_name, cfg, origins);
  for (size_t i = 0; i < overrides.size(); ++i) apply_override(overrides[i], static_cast<long>(i), cfg, origins);
  validate(cfg, origins, display_name);
  return cfg;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw ConfigError(fmt::format("{}: cannot open config file: {}", path, std::strerror(errno)));
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const int read_errno = std::ferror(file) ? errno : 0;  // e.g. EISDIR for a folder
  std::fclose(file);
  if (read_errno != 0)
    throw ConfigError(fmt::format("{}: cannot read config file: {}", path, std::strerror(read_errno)));
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

std::string describe_keys() {
  const Config defaults;
  std::string out = "Config keys (YAML `section:` then `key: value`; override any with --set section.key=value):\n";
  for (const auto& s : detail::sections()) {
    out += fmt::format("\n{}: {}\n", s.name, s.doc);
    for (const Field& f : detail::fields()) {
      if (f.section != s.name) continue;
      out += fmt::format("  {}.{} = {}  ({})\n      {}\n", f.section, f.key, f.write(defaults), f.type, f.doc);
    }
  }
  return out;
}

std::string checkpoint_dir(const Config& cfg) {
  if (!cfg.checkpoint.dir.empty()) return cfg.checkpoint.dir;
  return (std::filesystem::path(cfg.run.dir) / "checkpoints").string();
}

}  // namespace fsdp::config
