#include "fsdp/chat/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "fsdp/chat/python_string.h"
#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::chat {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

std::string read_text(const fs::path& path) {
  std::string text = read_regular_file(path.string());
  size_t bad = 0;
  if (!py::valid_utf8(text, &bad)) FSDP_FAIL("{} is not valid UTF-8 (byte {})", path.string(), bad);
  return text;
}

json read_json(const fs::path& path) {
  const std::string text = read_text(path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    FSDP_FAIL("{} is not valid JSON: {}", path.string(), e.what());
  } catch (const json::exception&) {  // out_of_range: 1e999
    FSDP_FAIL("{} holds a number too large for a double (e.g. 1e999)", path.string());
  }
}

bool is_added_token(const json& v) { return v.is_object() && v.value("__type", "") == "AddedToken"; }

// A special token as transformers reads it: a string, or an AddedToken object's "content".
std::optional<std::string> token_string(const json& v, bool dicts_are_tokens, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if ((is_added_token(v) || (dicts_are_tokens && v.is_object())) && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  FSDP_FAIL("{}: a special token is a string or an AddedToken object with a string \"content\", got {}", where, v.dump());
}

std::vector<std::pair<std::string, std::string>> special_tokens_of(const fs::path& dir, const json& config) {
  const std::string cfg_name = (dir / "tokenizer_config.json").string();
  // Legacy folders: special_tokens_map.json, read (and winning over the config) only when the
  // config has no added_tokens_decoder, as transformers does.
  json merged = config.is_object() ? config : json::object();
  std::map<std::string, std::string> where;
  for (const auto& [k, v] : merged.items()) where[k] = cfg_name + ": " + k;
  const fs::path map_path = dir / "special_tokens_map.json";
  if (!merged.contains("added_tokens_decoder") && fs::exists(map_path)) {
    const json map = read_json(map_path);
    if (!map.is_object()) FSDP_FAIL("{}: expected a JSON object", map_path.string());
    for (const auto& [k, v] : map.items()) {
      json value = v;
      if (v.is_object() && k != "extra_special_tokens") {
        value["__type"] = "AddedToken";  // any object there is an AddedToken
      }
      merged[k] = value;
      where[k] = map_path.string() + ": " + k;
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* key : kSpecialTokens)
    if (merged.contains(key))
      if (auto s = token_string(merged[key], false, where[key])) out.emplace_back(key, *s);
  // Model-specific tokens: other "<name>_token" keys holding a token, and extra_special_tokens
  // given as a mapping of names to tokens.
  auto add = [&](const std::string& k, const std::string& v) {
    for (auto& [ek, ev] : out)
      if (ek == k) {
        ev = v;
        return;
      }
    out.emplace_back(k, v);
  };
  for (const auto& [k, v] : merged.items()) {
    if (std::find(std::begin(kSpecialTokens), std::end(kSpecialTokens), k) != std::end(kSpecialTokens)) continue;
    if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0 && (v.is_string() || is_added_token(v)))
      add(k, *token_string(v, false, where[k]));
  }
  if (merged.contains("extra_special_tokens") && merged["extra_special_tokens"].is_object())
    for (const auto& [k, v] : merged["extra_special_tokens"].items())
      if (auto s = token_string(v, true, where["extra_special_tokens"] + "." + k)) add(k, *s);
  return out;
}

struct Source {
  std::string text;
  std::string origin;
};

std::shared_ptr<const ParsedTemplate> parse(const Source& s) {
  return std::make_shared<const ParsedTemplate>(parse_template(s.text, s.origin));
}

}  // namespace

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir_name, const std::string& name) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir)) FSDP_FAIL("chat template: {} is not a directory", dir_name);
  const fs::path cfg_path = dir / "tokenizer_config.json";
  json config = json::object();
  if (fs::exists(cfg_path)) {
    config = read_json(cfg_path);
    if (!config.is_object()) FSDP_FAIL("{}: expected a JSON object", cfg_path.string());
  }

  // Every template the folder holds, by name: the .jinja files win over the config.
  std::vector<std::pair<std::string, Source>> templates;
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) templates.emplace_back("default", Source{read_text(jinja), jinja.string()});
  const fs::path named_dir = dir / "chat_templates";
  if (fs::is_directory(named_dir)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(named_dir))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) templates.emplace_back(f.stem().string(), Source{read_text(f), f.string()});
  }
  bool single = templates.size() == 1 && templates[0].first == "default";
  if (templates.empty() && config.contains("chat_template") && !config["chat_template"].is_null()) {
    const json& ct = config["chat_template"];
    const std::string where = cfg_path.string() + ": chat_template";
    if (ct.is_string()) {
      templates.emplace_back("default", Source{ct.get<std::string>(), where});
      single = true;
    } else if (ct.is_array()) {
      for (size_t i = 0; i < ct.size(); ++i) {
        const json& e = ct[i];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          FSDP_FAIL("{}[{}]: expected an object with string \"name\" and \"template\", got {}", where, i, e.dump());
        templates.emplace_back(e["name"].get<std::string>(),
                               Source{e["template"].get<std::string>(), where + "[" + std::to_string(i) + "] (\"" +
                                                                            e["name"].get<std::string>() + "\")"});
      }
    } else {
      FSDP_FAIL("{}: expected a string or a list of {{\"name\", \"template\"}} objects, got {}", where, ct.type_name());
    }
  }
  if (templates.empty()) {
    std::string hint;
    if (fs::exists(dir / "chat_template.json"))
      hint = " (its chat_template.json is read by transformers' processors of multimodal models, not by its tokenizers)";
    FSDP_FAIL("{} has no chat template: no chat_template.jinja, and {} has no \"chat_template\"{}", dir_name,
              fs::exists(cfg_path) ? cfg_path.string() : "no tokenizer_config.json either, so it", hint);
  }

  auto find = [&](const std::string& n) -> const Source* {
    for (const auto& [k, s] : templates)
      if (k == n) return &s;
    return nullptr;
  };
  auto names = [&] {
    std::string out;
    for (const auto& [k, s] : templates) out += (out.empty() ? "\"" : ", \"") + k + "\"";
    return out;
  };
  ChatTemplate t;
  const Source* chosen = nullptr;
  if (!name.empty()) {
    chosen = find(name);
    if (!chosen || (single && name != "default"))
      FSDP_FAIL("{} has no chat template named \"{}\" (it has {})", dir_name, name, names());
  } else {
    chosen = find("default");
    if (!chosen)
      FSDP_FAIL("{} has several chat templates ({}) and none named \"default\": name the one to use", dir_name, names());
    if (const Source* tool = find("tool_use"); tool && !single) t.tool_use_ = parse(*tool);
  }
  t.source_ = chosen->text;
  t.origin_ = chosen->origin;
  t.parsed_ = parse(*chosen);
  t.special_tokens_ = special_tokens_of(dir, config);
  return t;
}

ChatTemplate ChatTemplate::from_file(const std::string& file, const std::string& tokens_dir) {
  const fs::path dir(tokens_dir);
  const fs::path cfg_path = dir / "tokenizer_config.json";
  json config = json::object();
  if (fs::exists(cfg_path)) {
    config = read_json(cfg_path);
    if (!config.is_object()) FSDP_FAIL("{}: expected a JSON object", cfg_path.string());
  }
  ChatTemplate t;
  t.source_ = read_text(fs::path(file));
  t.origin_ = file;
  t.parsed_ = parse(Source{t.source_, t.origin_});
  t.special_tokens_ = special_tokens_of(dir, config);
  return t;
}

bool ChatTemplate::model_dir_has_template(const std::string& dir_name) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (fs::exists(dir / "chat_template.jinja", ec) || fs::is_directory(dir / "chat_templates", ec)) return true;
  if (!fs::exists(dir / "tokenizer_config.json", ec)) return false;
  const json j = json::parse(read_regular_file((dir / "tokenizer_config.json").string()), nullptr,
                             /*allow_exceptions=*/false);
  return j.is_object() && j.contains("chat_template") && !j["chat_template"].is_null();
}

ChatTemplate ChatTemplate::from_string(const std::string& source, std::vector<std::pair<std::string, std::string>> special_tokens,
                                       const std::string& origin) {
  ChatTemplate t;
  t.source_ = source;
  t.origin_ = origin;
  t.parsed_ = parse(Source{source, origin});
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

namespace {

// transformers' message normalisation: keys whose value is null are dropped (OpenAI-style
// `"tool_calls": null` would otherwise print "None"), and reasoning under any of its names is
// copied to "thinking" (first) and "reasoning_content" (last), the names templates read.
Value normalise_message(const json& m, size_t i) {
  if (!m.is_object()) FSDP_FAIL("messages[{}]: a message is a JSON object, got {}", i, m.type_name());
  if (!m.contains("role")) FSDP_FAIL("messages[{}]: the message has no \"role\"", i);
  if (!m["role"].is_string()) FSDP_FAIL("messages[{}].role: expected a string, got {}", i, m["role"].type_name());
  json kept = json::object();
  for (const auto& [k, v] : m.items())
    if (!v.is_null()) kept[k] = v;
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    if (!kept.contains(field)) continue;
    const json reasoning = kept[field];
    json aliased = json::object();
    aliased["thinking"] = reasoning;
    for (const auto& [k, v] : kept.items()) aliased[k] = v;
    aliased["reasoning_content"] = reasoning;
    kept = std::move(aliased);
    break;
  }
  try {
    return from_json(kept);
  } catch (const TemplateValueError& e) {
    FSDP_FAIL("messages[{}]: {}", i, e.message);
  }
}

}  // namespace

RenderResult ChatTemplate::render(const json& messages, bool add_generation_prompt) const {
  return render(messages, add_generation_prompt, json(nullptr));
}

RenderResult ChatTemplate::render(const json& messages, bool add_generation_prompt, const json& extra,
                                  const RenderOptions& options) const {
  if (!messages.is_array()) FSDP_FAIL("messages: expected a JSON array of messages, got {}", messages.type_name());
  if (messages.empty()) FSDP_FAIL("messages: cannot apply a chat template to an empty conversation");
  if (!extra.is_null() && !extra.is_object())
    FSDP_FAIL("chat template variables: expected a JSON object, got {}", extra.type_name());
  ValueList msgs;
  msgs.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) msgs.push_back(normalise_message(messages[i], i));

  std::vector<std::pair<std::string, Value>> vars;
  vars.emplace_back("messages", Value::list(std::move(msgs)));
  vars.emplace_back("tools", Value::none());
  vars.emplace_back("documents", Value::none());
  vars.emplace_back("add_generation_prompt", Value(add_generation_prompt));
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, Value(v));
  bool has_tools = false;
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) {
      if (k == "messages" || k == "add_generation_prompt")
        FSDP_FAIL("chat template variables: \"{}\" is set by the render itself, not a variable", k);
      has_tools = has_tools || (k == "tools" && !v.is_null());
      Value value;
      try {
        value = from_json(v);
      } catch (const TemplateValueError& e) {
        FSDP_FAIL("chat template variables: {}: {}", k, e.message);
      }
      bool replaced = false;
      for (auto& [ek, ev] : vars)
        if (ek == k) ev = value, replaced = true;
      if (!replaced) vars.emplace_back(k, std::move(value));
    }
  }
  const ParsedTemplate& t = (has_tools && tool_use_) ? *tool_use_ : *parsed_;
  return render_template(t, vars, options);
}

}  // namespace fsdp::chat
