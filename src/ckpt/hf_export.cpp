// Hugging Face Llama export: config.json, sharded safetensors (+ index), tokenizer files,
// written into a temporary folder renamed into place. Layout and guarantees: hf_export.h.
#include "fsdp/ckpt/hf_export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/model/rope_scaling.h"
#include "durable_file.h"
#include "export_folder.h"
#include "export_tokenizer.h"

namespace fsdp::ckpt {

namespace {

using detail::TokenizerFiles;
using detail::write_file_synced;

namespace fs = std::filesystem;
using nlohmann::json;

// ---- what goes into the folder ----------------------------------------------------------

// transformers' rope_scaling object (null without scaling), as Llama 3.1's config.json has it.
json rope_scaling_json(const model::RopeScaling& s) {
  if (s.type == model::RopeScaling::Type::None) return nullptr;
  json r = {{"rope_type", model::rope_scaling_name(s.type)}, {"factor", s.factor}};
  if (s.type == model::RopeScaling::Type::Llama3) {
    r["low_freq_factor"] = s.low_freq_factor;
    r["high_freq_factor"] = s.high_freq_factor;
    r["original_max_position_embeddings"] = s.original_max_position;
  }
  return r;
}

json config_json(const model::LlamaConfig& cfg, const char* torch_dtype, std::optional<int64_t> bos,
                 std::optional<int64_t> eos) {
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", cfg.vocab_size},
            {"hidden_size", cfg.hidden_size},
            {"intermediate_size", cfg.intermediate_size},
            {"num_hidden_layers", cfg.num_layers},
            {"num_attention_heads", cfg.num_heads},
            {"num_key_value_heads", cfg.num_kv_heads},
            {"head_dim", cfg.head_dim()},
            {"max_position_embeddings", cfg.max_seq_len},
            {"rms_norm_eps", cfg.norm_eps},
            {"rope_theta", cfg.rope_theta},
            {"rope_scaling", rope_scaling_json(cfg.rope_scaling)},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"mlp_bias", false},
            {"tie_word_embeddings", cfg.tie_word_embeddings},
            {"pretraining_tp", 1},
            {"use_cache", true},
            {"torch_dtype", torch_dtype}};
  if (cfg.is_moe()) {
    FSDP_CHECK(cfg.rope_scaling.type == model::RopeScaling::Type::None,
               "write_hf_llama: a mixture of experts with {} RoPE scaling has no Hugging Face form: transformers "
               "4.x's MixtralForCausalLM ignores rope_scaling",
               model::rope_scaling_name(cfg.rope_scaling.type));
    // transformers 4.x's MixtralConfig: the per-expert weight names this writer uses.
    j["architectures"] = {"MixtralForCausalLM"};
    j["model_type"] = "mixtral";
    for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp", "rope_scaling"}) j.erase(key);
    j["num_local_experts"] = cfg.num_experts;
    j["num_experts_per_tok"] = cfg.experts_per_token;
    j["router_aux_loss_coef"] = cfg.router_aux_loss_coef;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = cfg.router_aux_loss_coef > 0;
    j["sliding_window"] = nullptr;
  }
  if (bos) j["bos_token_id"] = *bos;
  if (eos) j["eos_token_id"] = *eos;
  return j;
}

// The caller's units must be exactly the model's: the names and shapes written are theirs.
void check_units(const model::LlamaConfig& cfg, const std::vector<model::UnitLayout>& units) {
  const auto want = model::llama_units(cfg);
  FSDP_CHECK(units.size() == want.size(), "write_hf_llama: {} units given but the config has {} ({} layers)",
             units.size(), want.size(), cfg.num_layers);
  for (size_t u = 0; u < units.size(); ++u) {
    const auto &a = units[u], &b = want[u];
    FSDP_CHECK(a.name == b.name && a.numel == b.numel && a.params.size() == b.params.size(),
               "write_hf_llama: unit {} is '{}' ({} elements) but the config's is '{}' ({} elements)", u, a.name,
               a.numel, b.name, b.numel);
    for (size_t i = 0; i < a.params.size(); ++i) {
      const auto &p = a.params[i], &q = b.params[i];
      FSDP_CHECK(p.name == q.name && p.hf_name == q.hf_name && p.shape == q.shape && p.offset == q.offset,
                 "write_hf_llama: unit '{}' parameter {} is '{}' {} at {} but the config's is '{}' {} at {}", a.name,
                 i, p.name, p.shape.str(), p.offset, q.name, q.shape.str(), q.offset);
    }
  }
}

// One parameter in the export dtype, refusing values the file would not hold.
std::string convert_param(const float* src, const model::ParamSlot& p, const model::UnitLayout& unit, DType dtype) {
  return detail::encode_weights(src, p.numel, dtype, p.hf_name + " (" + p.name + " in unit '" + unit.name + "')");
}

}  // namespace

std::vector<std::string> hf_shard_plan(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes,
                                       std::vector<int>* shard_of_tensor) {
  FSDP_CHECK(max_shard_bytes > 0, "max_shard_bytes must be positive");
  std::vector<int> shard(tensor_bytes.size());
  int n = 0;                  // shards opened so far
  uint64_t current = 0;       // bytes in shard n - 1
  bool current_open = false;  // shard n - 1 can take more tensors
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const uint64_t b = tensor_bytes[i];
    if (b > max_shard_bytes) {  // alone in its own shard, as huggingface_hub does
      shard[i] = n++;
      current_open = false;
      continue;
    }
    if (!current_open || current + b > max_shard_bytes) {
      ++n;
      current = 0;
      current_open = true;
    }
    shard[i] = n - 1;
    current += b;
  }
  if (shard_of_tensor != nullptr) *shard_of_tensor = std::move(shard);
  if (n <= 1) return {"model.safetensors"};
  std::vector<std::string> names;
  for (int s = 0; s < n; ++s) names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n));
  return names;
}

namespace {

// What the export writes besides the weights, resolved and checked before the disk is touched.
struct ExportPlan {
  TokenizerFiles tok;
  std::optional<int64_t> bos, eos;
};

ExportPlan check_export_request(const std::string& out_dir, const model::LlamaConfig& cfg,
                                const std::vector<model::UnitLayout>& units,
                                const std::function<Tensor(int unit)>& full_unit, const HfExportOptions& opt) {
  FSDP_CHECK(!out_dir.empty(), "write_hf_llama: empty output folder name");
  cfg.validate();
  check_units(cfg, units);
  FSDP_CHECK(opt.dtype == DType::F32 || opt.dtype == DType::BF16,
             "write_hf_llama: dtype {} is not supported (float32 or bfloat16)", dtype_name(opt.dtype));
  FSDP_CHECK(opt.max_shard_bytes > 0, "write_hf_llama: max_shard_bytes must be positive");
  FSDP_CHECK(full_unit != nullptr, "write_hf_llama: no full_unit callback");
  FSDP_CHECK(opt.metadata.count("format") == 0,
             "write_hf_llama: metadata key 'format' is reserved (it is always \"pt\", as transformers expects)");
  ExportPlan plan;
  if (!opt.tokenizer_model.empty()) {
    plan.tok = detail::read_export_tokenizer(opt.tokenizer_model, cfg);
    FSDP_CHECK(plan.tok.vocab_size <= cfg.vocab_size,
               "write_hf_llama: tokenizer {} has {} pieces, more than the model's vocab_size {}",
               opt.tokenizer_model, plan.tok.vocab_size, cfg.vocab_size);
  }
  plan.bos = opt.bos_token_id;
  plan.eos = opt.eos_token_id;
  if (!plan.bos && plan.tok.bos_id >= 0) plan.bos = plan.tok.bos_id;
  if (!plan.eos && plan.tok.eos_id >= 0) plan.eos = plan.tok.eos_id;
  for (const auto& [what, id] : {std::pair{"bos_token_id", plan.bos}, std::pair{"eos_token_id", plan.eos}}) {
    FSDP_CHECK(!id || (*id >= 0 && *id < cfg.vocab_size), "write_hf_llama: {} {} is outside the vocabulary [0, {})",
               what, id.value_or(0), cfg.vocab_size);
  }
  return plan;
}

struct WrittenWeights {
  std::vector<std::string> shard_names;
  json weight_map = json::object();
  uint64_t total_size = 0;
};

// The weights into `dir`: one unit in memory, one shard pending; every tensor's shard is known
// before the first byte is written.
WrittenWeights write_weight_shards(const fs::path& dir, const std::vector<model::UnitLayout>& units,
                                   const std::function<Tensor(int unit)>& full_unit, const HfExportOptions& opt) {
  struct Item {
    int unit;
    const model::ParamSlot* slot;
  };
  std::vector<Item> items;
  std::vector<uint64_t> bytes;
  for (int u = 0; u < int(units.size()); ++u) {
    for (const auto& p : units[size_t(u)].params) {
      items.push_back({u, &p});
      bytes.push_back(uint64_t(p.numel) * dtype_size(opt.dtype));
    }
  }
  WrittenWeights out;
  std::vector<int> shard_of;
  out.shard_names = hf_shard_plan(bytes, opt.max_shard_bytes, &shard_of);

  const char* st_dtype = opt.dtype == DType::F32 ? "F32" : "BF16";
  std::map<std::string, std::string> metadata = opt.metadata;
  metadata["format"] = "pt";
  struct Pending {
    const model::ParamSlot* slot;
    std::string data;
  };
  std::vector<Pending> pending;
  int pending_shard = 0;
  const auto flush = [&] {
    if (pending.empty()) return;
    std::vector<WriteEntry> entries;
    for (const auto& p : pending) {
      entries.push_back({p.slot->hf_name, st_dtype, std::vector<int64_t>(p.slot->shape.begin(), p.slot->shape.end()),
                         p.data.data(), p.data.size()});
      out.weight_map[p.slot->hf_name] = out.shard_names[size_t(pending_shard)];
      out.total_size += p.data.size();
    }
    write_safetensors((dir / out.shard_names[size_t(pending_shard)]).string(), entries, metadata);
    pending.clear();
  };
  size_t next = 0;
  for (int u = 0; u < int(units.size()); ++u) {
    const model::UnitLayout& unit = units[size_t(u)];
    const Tensor flat = full_unit(u);
    FSDP_CHECK(flat.defined() && flat.dtype() == DType::F32 && flat.device().is_cpu() && flat.is_contiguous() &&
                   flat.dim() == 1 && flat.numel() >= unit.numel,
               "write_hf_llama: full_unit({}) for unit '{}' returned {}; expected a contiguous 1-D float32 CPU "
               "tensor of at least {} elements",
               u, unit.name, flat.defined() ? flat.str() : std::string("an undefined tensor"), unit.numel);
    const float* base = flat.data<float>();
    for (; next < items.size() && items[next].unit == u; ++next) {
      if (shard_of[next] != pending_shard) {
        flush();
        pending_shard = shard_of[next];
      }
      const model::ParamSlot& p = *items[next].slot;
      pending.push_back({&p, convert_param(base + p.offset, p, unit, opt.dtype)});
    }
  }
  flush();
  return out;
}

}  // namespace

void write_hf_llama(const std::string& out_dir, const model::LlamaConfig& cfg,
                    const std::vector<model::UnitLayout>& units, const std::function<Tensor(int unit)>& full_unit,
                    const HfExportOptions& opt) {
  const ExportPlan plan = check_export_request(out_dir, cfg, units, full_unit, opt);
  detail::ExportFolder folder(out_dir, opt.overwrite);
  const WrittenWeights weights = write_weight_shards(folder.tmp(), units, full_unit, opt);

  // ---- the JSON files, then the tokenizer ----
  const char* torch_dtype = opt.dtype == DType::F32 ? "float32" : "bfloat16";
  write_file_synced(folder.tmp() / "config.json", config_json(cfg, torch_dtype, plan.bos, plan.eos).dump(2) + "\n");
  if (weights.shard_names.size() > 1) {
    const json index = {{"metadata", {{"total_size", weights.total_size}}}, {"weight_map", weights.weight_map}};
    write_file_synced(folder.tmp() / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  for (const auto& [name, bytes] : plan.tok.files) write_file_synced(folder.tmp() / name, bytes);
  folder.commit();
}

}  // namespace fsdp::ckpt
