// A checkpoint out as a Hugging Face or PEFT folder; see checkpoint_export.h.
#include "fsdp/train/checkpoint_export.h"

#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "fsdp/config/config.h"
#include "fsdp/core/error.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/train/lora_model.h"

namespace fsdp::train {

namespace fs = std::filesystem;

namespace {

// A Hugging Face folder's own tokenizer (tokenizer.json first, as the facade picks), or "".
std::string tokenizer_in_folder(const std::string& folder) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(fs::path(folder) / name, ec)) return (fs::path(folder) / name).string();
  return "";
}

// The run's tokenizer, if it still exists: the one `prepare` recorded beside the run's
// training shards, else the one in the model.init_from folder the run started from (a
// Hugging Face folder carries its tokenizer).
std::string tokenizer_of_run(const ckpt::Manifest& m, const std::string& base_given = "") {
  std::error_code ec;
  try {
    const config::Config cfg = config::load_config_string(m.config_yaml, "checkpoint config");
    if (cfg.data.source == config::DataSource::Shards) {
      const auto shards = data::read_shard_manifest(cfg.data.path);
      if (shards && !shards->tokenizer_path.empty() && fs::exists(shards->tokenizer_path, ec))
        return data::resolve_tokenizer_file(shards->tokenizer_path);
    }
    // The base folder as this command sees it: --base, else a LoRA run's recorded base (kept
    // absolute), else model.init_from as the config wrote it (relative to where it trained).
    const std::string folder = !base_given.empty() ? base_given : m.base ? m.base->path : cfg.model.init_from;
    if (!folder.empty()) return tokenizer_in_folder(folder);
  } catch (const std::exception&) {
  }
  return "";
}

}  // namespace

std::string run_tokenizer(const std::string& checkpoint) {
  if (std::string own = tokenizer_in_folder(checkpoint); !own.empty()) return own;
  try {
    std::string path = checkpoint;
    if (!ckpt::is_checkpoint_dir(path)) {
      auto groups = dist::local_process_groups();
      path = ckpt::find_latest_checkpoint(checkpoint, *groups.world);
      if (path.empty()) return "";
    }
    return tokenizer_of_run(ckpt::CheckpointReader(path).manifest());
  } catch (const std::exception&) {
    return "";
  }
}

namespace {

// A LoRA checkpoint as a PEFT adapter folder or as a merged Hugging Face model.
void export_lora(const std::string& path, const std::string& output, bool adapter, const std::string& base,
                 ckpt::HfExportOptions opt, bool dtype_given, bool tokenizer_given) {
  const auto lora = LoraModel::from_checkpoint(path, base);
  const ckpt::CheckpointReader reader(path);
  const ckpt::Manifest& m = reader.manifest();
  if (adapter) {
    ckpt::PeftExportOptions popt;
    popt.dtype = dtype_given ? opt.dtype : DType::F32;  // adapters are small: exact by default
    popt.base_model_name_or_path = lora->base_path();
    popt.overwrite = opt.overwrite;
    spdlog::info("export: {} (step {}) adapters -> {} (PEFT folder, {})", path, m.state.step, output,
                 dtype_name(popt.dtype));
    ckpt::write_peft_adapter(output, lora->config(), lora->lora(), lora->lora_units(),
                             [&](int u) { return lora->adapters(u); }, popt);
    spdlog::info("export: done; load it with PeftModel.from_pretrained(base, \"{}\") or lora.init_from", output);
    return;
  }
  if (!tokenizer_given) opt.tokenizer_model = tokenizer_of_run(m, lora->base_path());
  opt.metadata["fsdp_train_step"] = std::to_string(m.state.step);
  spdlog::info("export: {} (step {}) merged into {} -> {} as {}", path, m.state.step,
               lora->base_path().empty() ? std::string("the seeded base") : lora->base_path(), output,
               dtype_name(opt.dtype));
  ckpt::write_hf_llama(output, lora->config(), lora->plain_units(), [&](int u) { return lora->merged(u); }, opt);
  spdlog::info("export: done; load it with {}.from_pretrained(\"{}\")",
               lora->config().is_moe() ? "MixtralForCausalLM" : "LlamaForCausalLM", output);
}

// MixtralForCausalLM has no routing bias: transformers will choose each token's experts
// by the router's probabilities alone, not as the run trained (model/router_bias.h).
void warn_router_bias(const ckpt::Manifest& m) {
  if (m.state.router_bias.empty()) return;
  spdlog::warn("export: the checkpoint routes with auxiliary-loss-free balancing biases (model.router_bias_update_rate; "
               "largest |bias| {:.4g}), which a Hugging Face MixtralForCausalLM folder cannot hold: transformers "
               "will route without them (fsdp_train generate and eval use them; see docs/mixtral.md)",
               model::router_bias_max_abs(m.state.router_bias));
}

}  // namespace

void export_checkpoint(const ExportRequest& r) {
  ckpt::HfExportOptions opt = r.options;
  if (r.tokenizer_given) opt.tokenizer_model = data::resolve_tokenizer_file(opt.tokenizer_model);  // a folder: its file
  const bool adapter = r.as == ExportAs::PeftAdapter, merge = r.as == ExportAs::Merged;
  std::string path = r.checkpoint;
  if (!ckpt::is_checkpoint_dir(path)) {
    // A checkpoint directory: its newest complete, verified checkpoint.
    auto groups = dist::local_process_groups();
    path = ckpt::find_latest_checkpoint(r.checkpoint, *groups.world);
    FSDP_CHECK(!path.empty(), "--checkpoint {}: neither a checkpoint nor a directory holding one", r.checkpoint);
  }
  const ckpt::CheckpointReader reader(path);
  reader.verify();
  const ckpt::Manifest& m = reader.manifest();
  FSDP_CHECK(m.base || (!adapter && !merge), "--{}: {} is not a LoRA checkpoint (export it as it is)",
             adapter ? "adapter" : "merge", path);
  FSDP_CHECK(!m.base || adapter || merge,
             "{} is a LoRA checkpoint (adapters only, on the base {}): export --adapter (a PEFT folder) or --merge "
             "(a full model)",
             path, m.base ? (m.base->path.empty() ? "seeded from train.seed" : m.base->path) : "");
  warn_router_bias(m);
  if (m.base) {
    export_lora(path, r.output, adapter, r.base, opt, r.dtype_given, r.tokenizer_given);
    return;
  }
  const auto units = model::llama_units(m.model);
  reader.check_model(m.model, units);
  if (!r.tokenizer_given) {
    opt.tokenizer_model = tokenizer_of_run(m);
    if (!opt.tokenizer_model.empty()) spdlog::info("export: including the run's tokenizer {}", opt.tokenizer_model);
  }
  opt.metadata["fsdp_train_step"] = std::to_string(m.state.step);
  spdlog::info("export: {} (step {}, {}, written by {} rank(s)) -> {} as {}", path, m.state.step, m.model.summary(),
               m.world_size, r.output, dtype_name(opt.dtype));
  ckpt::write_hf_llama(r.output, m.model, units, [&](int u) {
    // One rank's whole unit, whatever tensor layout saved it.
    Tensor full = Tensor::empty({units[size_t(u)].numel}, DType::F32);
    reader.read(units[size_t(u)], u, "master", 0, full);
    return full;
  }, opt);
  spdlog::info("export: done; load it with {}.from_pretrained(\"{}\") or model.init_from",
               m.model.is_moe() ? "MixtralForCausalLM" : "LlamaForCausalLM", r.output);
}

}  // namespace fsdp::train
