// The config as the model and the engine take it; see model_options.h.
#include "fsdp/config/model_options.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "fsdp/ckpt/hf_frozen.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/model/tensor_parallel.h"

namespace fsdp::config {

namespace {

// The shape keys a model folder's config.json decides: an explicit key must agree with it.
// Not among them: max_seq_len (a fine-tune may use a shorter context) and the router loss
// weights (training choices).
struct FolderKey {
  const char* key;
  int64_t model::LlamaConfig::*field;
};
constexpr FolderKey kFolderKeys[] = {
    {"vocab_size", &model::LlamaConfig::vocab_size},     {"hidden_size", &model::LlamaConfig::hidden_size},
    {"intermediate_size", &model::LlamaConfig::intermediate_size},
    {"num_layers", &model::LlamaConfig::num_layers},     {"num_heads", &model::LlamaConfig::num_heads},
    {"num_kv_heads", &model::LlamaConfig::num_kv_heads}, {"num_experts", &model::LlamaConfig::num_experts},
    {"experts_per_token", &model::LlamaConfig::experts_per_token}};

// The first shape key on which `a` and `b` differ ("" when none), and both values.
std::string first_difference(const model::LlamaConfig& a, const model::LlamaConfig& b, std::string& va,
                             std::string& vb) {
  for (const FolderKey& k : kFolderKeys) {
    if (a.*k.field == b.*k.field) continue;
    va = std::to_string(a.*k.field), vb = std::to_string(b.*k.field);
    return k.key;
  }
  for (auto [key, field] : {std::pair{"rope_theta", &model::LlamaConfig::rope_theta},
                            std::pair{"norm_eps", &model::LlamaConfig::norm_eps}}) {
    if (a.*field == b.*field) continue;
    va = fmt::format("{}", a.*field), vb = fmt::format("{}", b.*field);
    return key;
  }
  if (a.tie_word_embeddings != b.tie_word_embeddings) {
    va = a.tie_word_embeddings ? "true" : "false", vb = b.tie_word_embeddings ? "true" : "false";
    return "tie_word_embeddings";
  }
  return "";
}

// `cfg`, when given, turns a contradiction into a config error at the key's file:line.
model::LlamaConfig resolve(const config::ModelConfig& m, const config::Config* cfg) {
  if (m.init_from.empty()) {
    model::LlamaConfig c = config::apply_shape_keys(m, model::llama_preset(m.preset));
    c.validate();
    return c;
  }
  // A folder that is not there is the config's error (exit 2); a folder that is there but
  // holds a bad model is the model's (exit 1, in the reader's words).
  if (std::error_code ec; cfg != nullptr && !std::filesystem::exists(m.init_from, ec)) {
    const std::filesystem::path p(m.init_from);
    config::fail_key(*cfg, "model.init_from",
                     fmt::format("is '{}', which does not exist{}: a Hugging Face model folder (config.json and "
                                 "*.safetensors) to start from",
                                 m.init_from,
                                 p.is_absolute() ? std::string()
                                                 : fmt::format(" (relative to the working directory: {})",
                                                               std::filesystem::absolute(p, ec).lexically_normal().string())));
  }
  const model::LlamaConfig folder = ckpt::read_hf_llama_config(m.init_from);
  model::LlamaConfig c = config::apply_shape_keys(m, folder);
  std::string want, have;
  c.max_seq_len = folder.max_seq_len;  // compared apart: a shorter context is fine
  if (const std::string key = first_difference(c, folder, want, have); !key.empty()) {
    const std::string what = fmt::format("= {} contradicts {}/config.json, which has {}", want, m.init_from, have);
    if (cfg != nullptr) config::fail_key(*cfg, "model." + key, what);
    FSDP_FAIL("model.{} {}", key, what);
  }
  if (m.max_seq_len) c.max_seq_len = *m.max_seq_len;
  c.validate();
  return c;
}

}  // namespace

model::LlamaConfig resolve_model_config(const config::ModelConfig& m) { return resolve(m, nullptr); }

void warn_if_preset_unused(const config::Config& cfg, const model::LlamaConfig& m) {
  if (cfg.model.init_from.empty() || cfg.origins.where.count("model.preset") == 0) return;
  // model.preset names a shape, and a model folder brings its own: say so when they differ.
  std::string want, have;
  const model::LlamaConfig preset = model::llama_preset(cfg.model.preset);
  if (const std::string key = first_difference(preset, m, want, have); !key.empty()) {
    spdlog::warn("model.preset {} is not used: the shape comes from model.init_from {}/config.json ({} {} there, "
                 "{} in the preset)",
                 cfg.model.preset, cfg.model.init_from, key, have, want);
  }
}

model::LlamaConfig training_model_config(const config::Config& cfg) {
  model::LlamaConfig m = resolve(cfg.model, &cfg);
  m.capacity_factor = cfg.moe.capacity_factor;
  if (cfg.train.seq_len > m.max_seq_len) {
    config::fail_key(cfg, "train.seq_len",
                     fmt::format("{} exceeds the model's max_seq_len {}{}", cfg.train.seq_len, m.max_seq_len,
                                 cfg.model.init_from.empty() ? "" : " (max_position_embeddings of model.init_from)"));
  }
  // config::validate checked these against the preset; a model.init_from folder decides here.
  if (const auto why = model::tensor_parallel_problem(m, cfg.parallel.tensor, cfg.train.seq_len))
    config::fail_key(cfg, "parallel.tensor", fmt::format("{} ({}/config.json)", *why, cfg.model.init_from));
  if (cfg.train.activation_checkpointing_every > m.num_layers)
    config::fail_key(cfg, "train.activation_checkpointing_every",
                     fmt::format("must be at most the model's {} layers ({}/config.json), got {}", m.num_layers,
                                 cfg.model.init_from, cfg.train.activation_checkpointing_every));
  // config::validate checked this against the preset; a model.init_from folder decides here.
  if (cfg.model.router_bias_update_rate > 0 && !m.is_moe())
    config::fail_key(cfg, "model.router_bias_update_rate",
                     fmt::format("is {}, which needs a mixture of experts, but model.init_from {} is a dense model "
                                 "(no router to balance)",
                                 cfg.model.router_bias_update_rate, cfg.model.init_from));
  return m;
}

model::PeftSpec peft_keys(const config::Config& cfg) {
  model::PeftSpec p;
  p.lora.enabled = cfg.lora.enabled;
  p.lora.rank = cfg.lora.rank;
  p.lora.alpha = cfg.lora.alpha;
  p.lora.dropout = cfg.lora.dropout;
  p.lora.rslora = cfg.lora.rslora;
  p.lora.targets = cfg.lora.targets;
  p.quantization = cfg.model.quantization == "nf4" ? model::Quantization::Nf4 : model::Quantization::None;
  p.frozen_dtype = cfg.train.dtype;
  return p;
}

model::PeftSpec peft_spec(const config::Config& cfg, const model::LlamaConfig& model_cfg) {
  model::PeftSpec p = peft_keys(cfg);
  if (!cfg.lora.enabled) return p;
  if (!cfg.model.init_from.empty()) {
    ckpt::is_bnb_4bit_folder(cfg.model.init_from);  // refuses a quantization we cannot load, by name
    if (p.quantization == model::Quantization::Nf4)
      p.nf4_value_dtype = ckpt::base_weight_dtype(ckpt::SafetensorsFolder(cfg.model.init_from));
  }
  checked_lora_units(model_cfg, p);
  return p;
}

std::vector<model::UnitLayout> checked_lora_units(const model::LlamaConfig& model_cfg, const model::PeftSpec& p) {
  // The layout's checks (targets, rank, NF4 block multiples) are the config's errors.
  try {
    return model::lora_units(model_cfg, p);
  } catch (const config::ConfigError&) {
    throw;
  } catch (const Error& e) {
    throw config::ConfigError(e.what());
  }
}

int checked_shard_group(const Config& cfg, int world_size, int ranks_per_node) {
  // The tensor groups first: the data-parallel ranks FSDP shards over are what they leave.
  const int T = cfg.parallel.tensor;
  if (T > 1 && world_size % T != 0)
    fail_key(cfg, "parallel.tensor",
             fmt::format("{} must divide the world size ({} ranks): the world is made of whole tensor groups; use a "
                         "divisor of {}",
                         T, world_size, world_size));
  if (T > 1 && ranks_per_node % T != 0 && ranks_per_node < world_size)
    fail_key(cfg, "parallel.tensor",
             fmt::format("{} must divide the ranks of every node ({} per node): a tensor group stays inside one node "
                         "(its collectives are on the critical path of every layer); run a multiple of {} ranks per "
                         "node",
                         T, ranks_per_node, T));
  const int data = world_size / std::max(T, 1), data_per_node = std::max(ranks_per_node / std::max(T, 1), 1);
  switch (cfg.fsdp.sharding_strategy) {
    case ShardingStrategy::FULL_SHARD:
    case ShardingStrategy::SHARD_GRAD_OP: return data;
    case ShardingStrategy::NO_SHARD: return 1;
    case ShardingStrategy::HYBRID_SHARD:
    case ShardingStrategy::HYBRID_SHARD_ZERO2: break;
  }
  const int set = cfg.fsdp.shard_group_size;
  const int group = set > 0 ? set : std::min(data, data_per_node);
  if (group >= 1 && data % group == 0) return group;
  const std::string of = T > 1 ? fmt::format("the {} data-parallel ranks (world size {} / parallel.tensor {})", data,
                                             world_size, T)
                               : fmt::format("the world size {}", world_size);
  const std::string what = set > 0 ? fmt::format("is {}, which does not divide {}", set, of)
                                   : fmt::format("is 0 (one node's {}ranks: {}), which does not divide {}",
                                                 T > 1 ? "data-parallel " : "", group, of);
  fail_key(cfg, "fsdp.shard_group_size",
           fmt::format("{}: {} shards over groups of that many ranks and replicates across them; use a "
                       "divisor of {}, or 0 for the ranks of one node",
                       what, to_string(cfg.fsdp.sharding_strategy), data));
}

FsdpOptions fsdp_options(const Config& cfg, Device device) {
  FsdpOptions o;
  o.strategy = cfg.fsdp.sharding_strategy;
  o.param_dtype = cfg.fsdp.param_dtype;
  o.reduce_dtype = cfg.fsdp.reduce_dtype;
  o.prefetch_limit = cfg.fsdp.prefetch_limit;
  o.device = device;
  o.compute_dtype = cfg.train.dtype;
  return o;
}
model::ActivationCheckpointing activation_checkpointing(const TrainConfig& t) {
  model::ActivationCheckpointing ac;
  ac.mode = t.activation_checkpointing == "full"        ? model::Recompute::Full
            : t.activation_checkpointing == "selective" ? model::Recompute::Selective
                                                        : model::Recompute::None;
  ac.every = t.activation_checkpointing_every;
  ac.offload = t.activation_offload;
  ac.offload_horizon = t.activation_offload_horizon;
  return ac;
}

}  // namespace fsdp::config
