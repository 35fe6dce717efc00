// PEFT adapter folders in and out; see peft_adapter.h.
#include "fsdp/ckpt/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "durable_file.h"
#include "export_folder.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"

namespace fsdp::ckpt {

namespace {

using nlohmann::json;

bool is_set(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  const json& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_array() || v.is_object() || v.is_string()) return !v.empty() && !(v.is_string() && v.get<std::string>().empty());
  return true;
}

// Every LoraConfig feature whose presence changes what the adapter computes and that we do
// not implement, refused by its key.
void refuse_unimplemented(const json& j, const std::string& path) {
  const std::string type = json_file::string(j, "peft_type", path, "LORA");
  FSDP_CHECK(type == "LORA", "{}: peft_type '{}' is not supported (LORA only)", path, type);
  const std::pair<const char*, const char*> refused[] = {
      {"use_dora", "DoRA (use_dora: true)"},
      {"modules_to_save", "modules_to_save (fully trained extra modules)"},
      {"rank_pattern", "per-module ranks (rank_pattern)"},
      {"alpha_pattern", "per-module alphas (alpha_pattern)"},
      {"layers_to_transform", "adapting only some layers (layers_to_transform)"},
      {"layers_pattern", "layers_pattern"},
      {"fan_in_fan_out", "fan_in_fan_out: true (Conv1D-style weights)"},
      {"lora_bias", "lora_bias: true (a bias on lora_B)"},
      {"use_qalora", "QA-LoRA (use_qalora: true)"},
      {"target_parameters", "target_parameters (adapters on raw parameters)"},
      {"exclude_modules", "exclude_modules"},
      {"trainable_token_indices", "trainable_token_indices"},
      {"layer_replication", "layer_replication"},
      {"megatron_config", "megatron_config"},
  };
  for (const auto& [key, what] : refused)
    FSDP_CHECK(!is_set(j, key), "{}: {} is not supported; refusing to load an adapter it would change", path, what);
  const std::string bias = json_file::string(j, "bias", path, "none");
  FSDP_CHECK(bias == "none", "{}: bias '{}' is not supported (none only)", path, bias);
  if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string()) {
    // These initialisations rewrite the base weights, which we would not have.
    const std::string init = j["init_lora_weights"].get<std::string>();
    FSDP_CHECK(init == "gaussian", "{}: init_lora_weights '{}' is not supported (it changes the base model; true, "
               "false or gaussian only)", path, init);
  }
}

// The module paths ("model.layers.0.self_attn.q_proj") a target list selects, as PEFT
// matches target_modules: a path is selected when it equals a target or ends with "." and
// the target; "all-linear" selects every module LoRA can adapt in this model. An entry
// that selects nothing is an error naming it.
std::set<std::string> selected_paths(const std::vector<std::string>& targets, const model::LlamaConfig& cfg,
                                     const std::string& where) {
  const std::vector<std::string> modules = model::lora_target_modules(cfg);
  std::vector<std::string> paths;
  for (const model::UnitLayout& u : model::llama_units(cfg))
    for (const model::ParamSlot& p : u.params) {
      const std::string m = model::lora_module_of(p);
      if (std::find(modules.begin(), modules.end(), m) != modules.end())
        paths.push_back(p.hf_name.substr(0, p.hf_name.size() - std::string(".weight").size()));
    }
  std::set<std::string> out;
  for (const std::string& t : targets) {
    size_t hits = 0;
    for (const std::string& path : paths) {
      if (t == "all-linear" || path == t || path.ends_with("." + t)) out.insert(path), ++hits;
    }
    FSDP_CHECK(hits > 0, "{}: target '{}' names no module of this model (its modules: {}, or all-linear)", where, t,
               fmt::join(modules, ", "));
  }
  return out;
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kPeftConfigFile).string();
  std::error_code ec;
  FSDP_CHECK(std::filesystem::exists(path, ec),
             "cannot open {} (lora.init_from must be a PEFT adapter folder, as save_pretrained writes)", path);
  // A regular file only (a FIFO once hung lora.init_from and generate --adapter); every key
  // checked for its type here, so a mistyped one names itself ("lora_alpha": "8") instead of
  // surfacing as nlohmann's text or as a lora.* key the user never set.
  const json j = json_file::read(path);
  FSDP_CHECK(j.is_object(), "{}: expected a JSON object of adapter settings, got {}", path, json_file::kind(j));
  refuse_unimplemented(j, path);
  PeftAdapterConfig c;
  c.r = json_file::integer(json_file::required(j, "r", path), "r", path);
  FSDP_CHECK(c.r >= 1, "{}: 'r' (the adapters' rank) must be at least 1, got {}", path, c.r);
  c.lora_alpha = json_file::number(json_file::required(j, "lora_alpha", path), "lora_alpha", path);
  FSDP_CHECK(c.lora_alpha > 0 && std::isfinite(c.lora_alpha), "{}: 'lora_alpha' must be a positive number, got {}",
             path, c.lora_alpha);
  c.lora_dropout = json_file::number(j, "lora_dropout", path, 0.0);
  FSDP_CHECK(c.lora_dropout >= 0 && c.lora_dropout < 1, "{}: 'lora_dropout' must be in [0, 1), got {}", path,
             c.lora_dropout);
  c.use_rslora = json_file::boolean(j, "use_rslora", path, false);
  if (const json* base = json_file::find(j, "base_model_name_or_path"); base != nullptr && base->is_string())
    c.base_model_name_or_path = base->get<std::string>();
  c.target_modules = json_file::strings(j, "target_modules", path);
  return c;
}

std::unique_ptr<SafetensorsFolder> open_peft_adapter_weights(const std::string& dir) {
  const std::filesystem::path weights = std::filesystem::path(dir) / kPeftWeightsFile;
  std::error_code ec;
  if (!std::filesystem::exists(weights, ec)) {
    const bool bin = std::filesystem::exists(std::filesystem::path(dir) / "adapter_model.bin", ec);
    FSDP_FAIL("adapter folder {} has no {}{} (a PEFT adapter folder holds {} and {}, as save_pretrained writes them)",
              dir, kPeftWeightsFile,
              bin ? " but an adapter_model.bin, a PyTorch pickle, which is not read: save it with "
                    "save_pretrained(..., safe_serialization=True)"
                  : "",
              kPeftConfigFile, kPeftWeightsFile);
  }
  return std::make_unique<SafetensorsFolder>(dir);
}

void check_peft_adapter_matches(const PeftAdapterConfig& a, const model::LoraSpec& lora,
                                const model::LlamaConfig& cfg, const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kPeftConfigFile).string();
  FSDP_CHECK(a.r == lora.rank, "{}: r is {} but lora.rank is {}", path, a.r, lora.rank);
  FSDP_CHECK(a.lora_alpha == lora.alpha, "{}: lora_alpha is {} but lora.alpha is {}", path, a.lora_alpha, lora.alpha);
  FSDP_CHECK(a.use_rslora == lora.rslora, "{}: use_rslora is {} but lora.rslora is {}", path, a.use_rslora,
             lora.rslora);
  const std::set<std::string> theirs = selected_paths(a.target_modules, cfg, path + ": target_modules");
  const std::set<std::string> ours = selected_paths(lora.targets, cfg, "lora.targets");
  std::vector<std::string> only_theirs, only_ours;
  std::set_difference(theirs.begin(), theirs.end(), ours.begin(), ours.end(), std::back_inserter(only_theirs));
  std::set_difference(ours.begin(), ours.end(), theirs.begin(), theirs.end(), std::back_inserter(only_ours));
  FSDP_CHECK(only_theirs.empty() && only_ours.empty(),
             "{}: the adapter's target_modules and lora.targets [{}] select different modules ({} only in the adapter, "
             "e.g. {}; {} only in lora.targets, e.g. {})",
             path, fmt::join(lora.targets, ", "), only_theirs.size(), only_theirs.empty() ? "-" : only_theirs.front(),
             only_ours.size(), only_ours.empty() ? "-" : only_ours.front());
}

void write_peft_adapter(const std::string& out_dir, const model::LlamaConfig& cfg, const model::LoraSpec& lora,
                        const std::vector<model::UnitLayout>& units, const std::function<Tensor(int unit)>& full_unit,
                        const PeftExportOptions& opt) {
  FSDP_CHECK(opt.dtype == DType::F32 || opt.dtype == DType::BF16,
             "write_peft_adapter: dtype {} is not supported (float32 or bfloat16)", dtype_name(opt.dtype));
  std::vector<std::string> data;  // kept alive until the file is written
  std::vector<WriteEntry> entries;
  for (int u = 0; u < int(units.size()); ++u) {
    const model::UnitLayout& unit = units[size_t(u)];
    if (unit.numel == 0) continue;
    const Tensor flat = full_unit(u);
    FSDP_CHECK(flat.defined() && flat.dtype() == DType::F32 && flat.device().is_cpu() && flat.is_contiguous() &&
                   flat.numel() >= unit.numel,
               "write_peft_adapter: full_unit({}) for unit '{}' returned {}", u, unit.name,
               flat.defined() ? flat.str() : std::string("an undefined tensor"));
    for (const model::ParamSlot& p : unit.params) {
      data.push_back(detail::encode_weights(flat.data<float>() + p.offset, p.numel, opt.dtype, p.hf_name));
      entries.push_back({p.hf_name, opt.dtype == DType::F32 ? "F32" : "BF16",
                         std::vector<int64_t>(p.shape.begin(), p.shape.end()), nullptr, data.back().size()});
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) entries[i].data = data[i].data();
  FSDP_CHECK(!entries.empty(), "write_peft_adapter: the layout has no adapters");
  // Module names, as PEFT writes them for target_modules given by name (it matches them as
  // path suffixes in every layer).
  std::set<std::string> targets;
  for (const std::string& path : selected_paths(lora.targets, cfg, "lora.targets"))
    targets.insert(path.substr(path.rfind('.') + 1));
  const json config = {{"peft_type", "LORA"},
                       {"task_type", "CAUSAL_LM"},
                       {"r", lora.rank},
                       {"lora_alpha", lora.alpha},
                       {"lora_dropout", lora.dropout},
                       {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                       {"use_rslora", lora.rslora},
                       {"base_model_name_or_path", opt.base_model_name_or_path},
                       {"bias", "none"},
                       {"fan_in_fan_out", false},
                       {"inference_mode", true},
                       {"init_lora_weights", true},
                       {"use_dora", false},
                       {"modules_to_save", nullptr},
                       {"layers_to_transform", nullptr},
                       {"layers_pattern", nullptr},
                       {"rank_pattern", json::object()},
                       {"alpha_pattern", json::object()},
                       {"revision", nullptr},
                       {"lora_bias", false}};
  detail::ExportFolder folder(out_dir, opt.overwrite);
  write_safetensors((folder.tmp() / kPeftWeightsFile).string(), entries, {{"format", "pt"}});
  detail::write_file_synced(folder.tmp() / kPeftConfigFile, config.dump(2) + "\n");
  folder.commit();
}

}  // namespace fsdp::ckpt
