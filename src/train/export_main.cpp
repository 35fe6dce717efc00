#include "fsdp/train/export_main.h"

#include "fsdp/train/error_report.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/hf_export.h"
#include "fsdp/config/config.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/model/param_units.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "fsdp/train/lora_model.h"

namespace fsdp::train {

namespace fs = std::filesystem;

const char* export_help() {
  return "usage: fsdp_train export --checkpoint DIR --output HF_DIR [options]\n"
         "\n"
         "Writes a training checkpoint as a Hugging Face Llama folder: config.json, the weights\n"
         "as safetensors shards with model.safetensors.index.json, and tokenizer.model when known.\n"
         "\n"
         "options:\n"
         "  --checkpoint DIR     a checkpoint (<checkpoint.dir>/step_N) or a checkpoint directory,\n"
         "                       of which the newest complete checkpoint is taken (required)\n"
         "  --output HF_DIR      the folder to create; it must not exist or be empty (required)\n"
         "  --dtype D            bfloat16 (default, as published Llama weights) or float32 (exact)\n"
         "  --tokenizer MODEL    sentencepiece model to include; default: the one `fsdp_train\n"
         "                       prepare` recorded for the run's data.path, if it still exists\n"
         "  --max-shard-size N   largest safetensors file in bytes, or with a GB/MB suffix\n"
         "                       (default 5GB, as transformers' save_pretrained)\n"
         "\n"
         "A LoRA checkpoint (lora.enabled) holds adapters only; export one of:\n"
         "  --adapter            a PEFT adapter folder (adapter_config.json, adapter_model.safetensors\n"
         "                       with PEFT's names; float32 unless --dtype bfloat16), which\n"
         "                       PeftModel.from_pretrained loads on the base\n"
         "  --merge              a plain Hugging Face model with W + scale * B A merged into the base\n"
         "                       (an NF4 base dequantized first, as PEFT's merge_and_unload does)\n"
         "  --base DIR           the base folder, if it moved since training (default: the one the\n"
         "                       checkpoint names; its bytes must be the ones trained on)\n"
         "\n"
         "Exit status: 0 done, 1 the export failed, 2 usage error.\n";
}

namespace {

uint64_t parse_size(const std::string& v) {
  double scale = 1;
  std::string num = v;
  for (auto [suffix, s] : {std::pair{"GB", 1e9}, std::pair{"MB", 1e6}, std::pair{"KB", 1e3}}) {
    if (num.size() > 2 && num.ends_with(suffix)) {
      num.resize(num.size() - 2);
      scale = s;
      break;
    }
  }
  try {
    size_t used = 0;
    const double d = std::stod(num, &used);
    if (used == num.size() && d > 0) return uint64_t(d * scale);
  } catch (const std::exception&) {
  }
  throw UsageError{"--max-shard-size needs a size such as 5GB or 200MB, not '" + v + "'"};
}

// The tokenizer `prepare` recorded beside the run's training shards, if it still exists.
std::string tokenizer_of_run(const ckpt::Manifest& m) {
  try {
    const config::Config cfg = config::load_config_string(m.config_yaml, "checkpoint config");
    if (cfg.data.source != config::DataSource::Shards) return "";
    const auto m = data::read_shard_manifest(cfg.data.path);
    return m && !m->tokenizer_path.empty() && fs::exists(m->tokenizer_path) ? m->tokenizer_path : "";
  } catch (const std::exception&) {
    return "";
  }
}

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
    spdlog::info("export: {} (step {}) adapters -> {} (PEFT folder, {})", path, m.state.step, output,
                 dtype_name(popt.dtype));
    ckpt::write_peft_adapter(output, lora->config(), lora->lora(), lora->lora_units(),
                             [&](int u) { return lora->adapters(u); }, popt);
    spdlog::info("export: done; load it with PeftModel.from_pretrained(base, \"{}\") or lora.init_from", output);
    return;
  }
  if (!tokenizer_given) opt.tokenizer_model = tokenizer_of_run(m);
  opt.metadata["fsdp_train_step"] = std::to_string(m.state.step);
  spdlog::info("export: {} (step {}) merged into {} -> {} as {}", path, m.state.step,
               lora->base_path().empty() ? std::string("the seeded base") : lora->base_path(), output,
               dtype_name(opt.dtype));
  ckpt::write_hf_llama(output, lora->config(), lora->plain_units(), [&](int u) { return lora->merged(u); }, opt);
  spdlog::info("export: done; load it with {}.from_pretrained(\"{}\")",
               lora->config().is_moe() ? "MixtralForCausalLM" : "LlamaForCausalLM", output);
}

}  // namespace

int export_main(int argc, char** argv) {
  apply_log_level_from_env();  // SPDLOG_LEVEL=debug shows where an error was raised
  std::string checkpoint, output, base;
  ckpt::HfExportOptions opt;
  bool tokenizer_given = false, adapter = false, merge = false, dtype_given = false;
  try {
    ArgCursor args(argc, argv);
    while (args.next()) {
      const std::string& a = args.arg();
      auto value = [&] { return args.value(); };
      if (a == "--help" || a == "-h") {
        std::fputs(export_help(), stdout);
        return kExitOk;
      } else if (a == "--checkpoint") {
        checkpoint = value();
      } else if (a == "--output") {
        output = value();
      } else if (a == "--dtype") {
        const std::string d = value();
        if (d == "bfloat16") opt.dtype = DType::BF16;
        else if (d == "float32") opt.dtype = DType::F32;
        else throw UsageError{"--dtype must be bfloat16 or float32, not '" + d + "'"};
        dtype_given = true;
      } else if (a == "--adapter") {
        adapter = true;
      } else if (a == "--merge") {
        merge = true;
      } else if (a == "--base") {
        base = value();
      } else if (a == "--tokenizer") {
        opt.tokenizer_model = value();
        tokenizer_given = true;
      } else if (a == "--max-shard-size") {
        opt.max_shard_bytes = parse_size(value());
      } else {
        throw UsageError{"unknown argument '" + args.raw() + "'"};
      }
    }
    if (checkpoint.empty()) throw UsageError{"--checkpoint DIR is required"};
    if (output.empty()) throw UsageError{"--output HF_DIR is required"};
    if (adapter && merge) throw UsageError{"--adapter and --merge exclude each other"};
    if (!base.empty() && !merge) throw UsageError{"--base is for --merge (the adapter folder needs no base)"};
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: fsdp_train export: %s\n\n%s", e.message.c_str(), export_help());
    return kExitUsage;
  }

  try {
    std::string path = checkpoint;
    if (!ckpt::is_checkpoint_dir(path)) {
      // A checkpoint directory: its newest complete, verified checkpoint.
      auto groups = dist::local_process_groups();
      path = ckpt::find_latest_checkpoint(checkpoint, *groups.world);
      FSDP_CHECK(!path.empty(), "--checkpoint {}: neither a checkpoint nor a directory holding one", checkpoint);
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
    if (m.base) {
      export_lora(path, output, adapter, base, opt, dtype_given, tokenizer_given);
      return kExitOk;
    }
    const auto units = model::llama_units(m.model);
    reader.check_model(m.model, units);
    if (!tokenizer_given) {
      opt.tokenizer_model = tokenizer_of_run(m);
      if (!opt.tokenizer_model.empty()) spdlog::info("export: including the run's tokenizer {}", opt.tokenizer_model);
    }
    opt.metadata["fsdp_train_step"] = std::to_string(m.state.step);
    spdlog::info("export: {} (step {}, {}, written by {} rank(s)) -> {} as {}", path, m.state.step, m.model.summary(),
                 m.world_size, output, dtype_name(opt.dtype));
    ckpt::write_hf_llama(output, m.model, units, [&](int u) {
      Tensor full = Tensor::empty({units[size_t(u)].numel}, DType::F32);
      reader.read(u, "master", 0, full);
      return full;
    }, opt);
    spdlog::info("export: done; load it with {}.from_pretrained(\"{}\") or model.init_from",
                 m.model.is_moe() ? "MixtralForCausalLM" : "LlamaForCausalLM", output);
  } catch (const std::exception& e) {
    report_error(e);
    return kExitError;
  }
  return kExitOk;
}

}  // namespace fsdp::train
