// `fsdp_train export --checkpoint DIR --output HF_DIR`: the command line over
// train::export_checkpoint (fsdp/train/checkpoint_export.h).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/train/checkpoint_export.h"
#include "fsdp/train/exit_codes.h"

namespace fsdp::cli {

using train::kExitError;
using train::kExitOk;
using train::kExitUsage;
namespace fs = std::filesystem;

const char* export_help() {
  return "usage: fsdp_train export --checkpoint DIR --output HF_DIR [options]\n"
         "\n"
         "Writes a training checkpoint as a Hugging Face Llama folder: config.json, the weights\n"
         "as safetensors shards with model.safetensors.index.json, and the run's tokenizer when known.\n"
         "\n"
         "options:\n"
         "  --checkpoint DIR     a checkpoint (<checkpoint.dir>/step_N) or a checkpoint directory,\n"
         "                       of which the newest complete checkpoint is taken (required)\n"
         "  --output HF_DIR      the folder to create; it must not exist or be empty (required)\n"
         "  --overwrite          replace HF_DIR when it exists and is not empty (once the new folder\n"
         "                       is complete)\n"
         "  --dtype D            bfloat16 (default, as published Llama weights) or float32 (exact)\n"
         "  --tokenizer PATH     the tokenizer to include: a tokenizer.model, a tokenizer.json (with the\n"
         "                       files beside it) or a folder holding either; default: the one\n"
         "                       `fsdp_train prepare` recorded for the run's data.path, else the\n"
         "                       model.init_from folder's, if it still exists\n"
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
    const double bytes = std::stod(num, &used) * scale;
    // A whole number of bytes, at least one (0.1 once passed as 0 and failed the export).
    if (used == num.size() && bytes >= 1 && bytes < 9.2e18 && bytes == std::floor(bytes)) return uint64_t(bytes);
  } catch (const std::exception&) {
  }
  throw UsageError{"--max-shard-size needs a size of at least one byte such as 5GB, 200MB or 1000000, not '" + v + "'"};
}

}  // namespace

int export_command(int argc, char** argv) {
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
      } else if (a == "--overwrite" && !args.has_inline_value()) {
        opt.overwrite = true;
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
        throw unknown_argument(args.raw(), {"--help", "--checkpoint", "--output", "--overwrite", "--dtype",
                                            "--adapter", "--merge", "--base", "--tokenizer", "--max-shard-size"});
      }
    }
    if (checkpoint.empty()) throw UsageError{"--checkpoint DIR is required"};
    if (output.empty()) throw UsageError{"--output HF_DIR is required"};
    if (adapter && merge) throw UsageError{"--adapter and --merge exclude each other"};
    if (!base.empty() && !merge) throw UsageError{"--base is for --merge (the adapter folder needs no base)"};
    // Refusals that need no checkpoint read: the command line's errors, nothing was done.
    std::error_code ec;
    if (!fs::exists(checkpoint, ec)) throw UsageError{"--checkpoint " + checkpoint + ": no such checkpoint or folder"};
    if (!opt.overwrite && fs::is_directory(output, ec) && !fs::is_empty(output, ec))
      throw UsageError{"--output " + output + " exists and is not empty; choose a new folder, or --overwrite to "
                       "replace it"};
  } catch (const UsageError& e) {
    print_usage_error("export", e.message);
    return kExitUsage;
  }

  try {
    train::ExportRequest request;
    request.checkpoint = checkpoint;
    request.output = output;
    request.as = adapter ? train::ExportAs::PeftAdapter : merge ? train::ExportAs::Merged : train::ExportAs::Model;
    request.base = base;
    request.options = opt;
    request.dtype_given = dtype_given;
    request.tokenizer_given = tokenizer_given;
    train::export_checkpoint(request);
  } catch (const std::exception& e) {
    report_error("export", e);
    return kExitError;
  }
  return kExitOk;
}

}  // namespace fsdp::cli
