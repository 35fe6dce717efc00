// `fsdp_train generate`: flags, weight loading, tokenization and printing around the
// generation loop of model/generate.h. See include/fsdp/train/generate_main.h.
#include "fsdp/train/generate_main.h"
#include "fsdp/train/error_report.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/model/generate.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/model/sampling.h"
#include "fsdp/train/lora_model.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

namespace fs = std::filesystem;

const char* generate_help() {
  return "usage: fsdp_train generate --checkpoint DIR --tokenizer MODEL --prompt TEXT [options]\n"
         "\n"
         "Prints TEXT followed by the model's completion of it (log lines go to stderr).\n"
         "\n"
         "options:\n"
         "  --checkpoint DIR        the model (required): a Hugging Face Llama folder (config.json\n"
         "                          plus *.safetensors), an fsdp_train checkpoint (step_<N>/), or a\n"
         "                          checkpoint.dir, whose newest complete checkpoint is used\n"
         "                          (a LoRA checkpoint runs with its adapters merged into its base)\n"
         "  --adapter DIR           a PEFT LoRA adapter folder to merge into the --checkpoint Hugging\n"
         "                          Face folder (its base; a bitsandbytes 4-bit one is dequantized)\n"
         "  --tokenizer MODEL       sentencepiece .model file with the model's vocabulary (required);\n"
         "                          the prompt gets its BOS first where it defines one\n"
         "  --prompt TEXT           the text to continue (required; may be empty when the\n"
         "                          tokenizer has a BOS)\n"
         "  --max-new-tokens N      generate at most N tokens (default 64); generation also stops\n"
         "                          after the tokenizer's EOS and at the model's context length\n"
         "  --temperature T         softmax temperature, 0 = greedy (default 0.8)\n"
         "  --top-k K               sample among the K most likely tokens, 0 = off (default 0)\n"
         "  --top-p P               sample from the nucleus of probability mass P, 1 = off (default 1)\n"
         "  --seed S                random seed (default 0): the same seed gives the same text\n"
         "  --device D              auto (default: the GPU when this build has the CUDA backend and\n"
         "                          one is visible), cpu, or cuda\n"
         "  --dtype T               compute dtype: float32 (the CPU's only one), bfloat16 (the\n"
         "                          GPU's default) or float16\n"
         "  --help                  this text\n"
         "\n"
         "Exit status: 0 done, 1 the run failed (bad model folder or tokenizer, prompt too long,\n"
         "vocabularies differ), 2 usage error.\n";
}

namespace {

struct GenerateArgs {
  std::string checkpoint, tokenizer, prompt, adapter;
  bool has_prompt = false;
  int64_t max_new_tokens = 64;
  model::SamplingOptions sampling;
  std::string device = "auto";
  std::string dtype;  // "" = float32 on the CPU, bfloat16 on a GPU
  bool help = false;
};

double parse_number(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size() && std::isfinite(d)) return d;
  } catch (const std::exception&) {
  }
  throw UsageError{flag + " needs a number, not '" + v + "'"};
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  const double d = parse_number(flag, v);
  if (d < 0 || d != std::floor(d) || d > 1e15) throw UsageError{flag + " needs a whole number >= 0, not '" + v + "'"};
  return int64_t(d);
}

uint64_t parse_seed(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    if (!v.empty() && v[0] != '-') {
      const unsigned long long s = std::stoull(v, &used, 10);
      if (used == v.size()) return s;
    }
  } catch (const std::exception&) {
  }
  throw UsageError{flag + " needs a whole number in [0, 2^64), not '" + v + "'"};
}

GenerateArgs parse_generate_args(int argc, char** argv) {
  GenerateArgs a;
  ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.arg();
    auto value = [&] { return args.value(); };
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--checkpoint") {
      a.checkpoint = value();
    } else if (arg == "--tokenizer") {
      a.tokenizer = value();
    } else if (arg == "--adapter") {
      a.adapter = value();
    } else if (arg == "--prompt") {
      a.prompt = value();
      a.has_prompt = true;
    } else if (arg == "--max-new-tokens") {
      a.max_new_tokens = parse_count(arg, value());
    } else if (arg == "--temperature") {
      a.sampling.temperature = parse_number(arg, value());
      if (a.sampling.temperature < 0) throw UsageError{"--temperature must be >= 0 (0 = greedy)"};
    } else if (arg == "--top-k") {
      a.sampling.top_k = parse_count(arg, value());
    } else if (arg == "--top-p") {
      a.sampling.top_p = parse_number(arg, value());
      if (!(a.sampling.top_p > 0 && a.sampling.top_p <= 1)) throw UsageError{"--top-p must be in (0, 1] (1 = off)"};
    } else if (arg == "--seed") {
      a.sampling.seed = parse_seed(arg, value());
    } else if (arg == "--device") {
      a.device = value();
      if (a.device != "auto" && a.device != "cpu" && a.device != "cuda")
        throw UsageError{"--device must be auto, cpu or cuda, not '" + a.device + "'"};
    } else if (arg == "--dtype") {
      a.dtype = value();
      if (a.dtype != "float32" && a.dtype != "bfloat16" && a.dtype != "float16")
        throw UsageError{"--dtype must be float32, bfloat16 or float16, not '" + a.dtype + "'"};
    } else {
      throw UsageError{"unknown argument '" + args.raw() + "'"};
    }
  }
  if (a.help) return a;
  if (a.checkpoint.empty()) throw UsageError{"--checkpoint DIR is required"};
  if (a.tokenizer.empty()) throw UsageError{"--tokenizer MODEL is required"};
  if (!a.has_prompt) throw UsageError{"--prompt TEXT is required"};
  if (a.device == "cpu" && !a.dtype.empty() && a.dtype != "float32")
    throw UsageError{"--dtype " + a.dtype + " needs --device cuda: the CPU computes in float32"};
  return a;
}

// --device as a Device: the GPU of this process (cuda:0; CUDA_VISIBLE_DEVICES picks which).
Device resolve_generate_device(const std::string& want) {
#if defined(FSDP_WITH_CUDA)
  const int visible = cuda::device_count();
  if (want == "cuda" || (want == "auto" && cuda::real_gpu_visible())) {
    FSDP_CHECK(visible > 0, "--device cuda: no CUDA device is visible (CUDA_VISIBLE_DEVICES='{}')",
               std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
    return Device::cuda(0);
  }
#else
  FSDP_CHECK(want != "cuda", "--device cuda: this fsdp_train was built without the CUDA backend");
#endif
  return Device::cpu();
}

// Every unit's full parameters and nothing else: generation computes no gradients.
class InferenceParams final : public model::ParamProvider {
 public:
  explicit InferenceParams(const std::vector<model::UnitLayout>& units) {
    for (const auto& u : units) params_.push_back(Tensor::empty({u.numel}, DType::F32));
  }
  Tensor params(int unit) override { return params_[size_t(unit)]; }
  Tensor grads(int) override { FSDP_FAIL("generate: the model holds no gradients"); }
  // Converts every unit to `dtype` on `device` (the weights load as float32 on the host).
  void move_to(Device device, DType dtype) {
    if (device.is_cpu() && dtype == DType::F32) return;
    for (Tensor& p : params_) {
      Tensor moved = Tensor::empty(p.sizes(), dtype, device);
      moved.copy_(p);
      p = moved;
    }
  }

 private:
  std::vector<Tensor> params_;
};

struct LoadedModel {
  model::LlamaConfig config;
  std::unique_ptr<InferenceParams> params;
  std::string kind;  // for the log
};

// The fsdp_train checkpoint to read for `path`, its files checked against their CRCs: the
// path itself when it is one (step_<N>/ with a manifest; a corrupt file is an error naming
// it), else the newest step_<N> under it (a checkpoint.dir) that verifies, skipping broken
// ones as resume does; "" when there is none.
std::string find_checkpoint(const std::string& path) {
  if (ckpt::is_checkpoint_dir(path)) {
    ckpt::CheckpointReader(path).verify();
    return path;
  }
  for (const std::string& candidate : ckpt::list_checkpoints(path)) {
    try {
      ckpt::CheckpointReader(candidate).verify();
      return candidate;
    } catch (const std::exception& e) {
      spdlog::warn("skipping checkpoint {}: {}", candidate, e.what());
    }
  }
  return "";
}

// A LoRA model's units with the adapters merged (train/lora_model.h).
LoadedModel merged_model(LoraModel& lora, std::string kind) {
  LoadedModel m;
  m.kind = std::move(kind);
  m.config = lora.config();
  m.params = std::make_unique<InferenceParams>(lora.plain_units());
  for (int u = 0; u < int(lora.plain_units().size()); ++u) m.params->params(u).copy_(lora.merged(u));
  return m;
}

// Loads the weights at `path` (--checkpoint) into full float32 units.
//   Hugging Face folder: config.json + *.safetensors (ckpt/hf_import.h); with --adapter, a
//   PEFT folder merged into it.
//   fsdp_train checkpoint: step_<N>/ or a checkpoint.dir holding them (ckpt/checkpoint_reader.h);
//   the fp32 master weights, whatever rank count saved them; a LoRA checkpoint's adapters
//   merged into the base it names.
LoadedModel load_weights(const std::string& path, const std::string& adapter) {
  FSDP_CHECK(fs::is_directory(path), "--checkpoint {}: no such directory", path);
  LoadedModel m;
  if (!adapter.empty()) {
    FSDP_CHECK(fs::exists(fs::path(path) / "config.json"),
               "--adapter {} needs --checkpoint to be its base's Hugging Face folder ({} not found)", adapter,
               (fs::path(path) / "config.json").string());
    const auto lora = LoraModel::from_peft(path, adapter);
    return merged_model(*lora, "Hugging Face folder " + path + " with the PEFT adapter " + adapter + " merged");
  }
  if (fs::exists(fs::path(path) / "config.json")) {
    m.kind = "Hugging Face folder " + path;
    m.config = ckpt::read_hf_llama_config(path);
    const auto units = model::llama_units(m.config);
    m.params = std::make_unique<InferenceParams>(units);
    const ckpt::SafetensorsFolder folder(path);
    for (int u = 0; u < int(units.size()); ++u) ckpt::load_hf_unit(folder, units[size_t(u)], m.params->params(u));
    return m;
  }
  if (const std::string dir = find_checkpoint(path); !dir.empty()) {
    const ckpt::CheckpointReader reader(dir);
    if (reader.manifest().base) {
      const auto lora = LoraModel::from_checkpoint(dir);
      return merged_model(*lora, fmt::format("fsdp_train LoRA checkpoint {} (step {}) merged into {}", dir,
                                             reader.manifest().state.step,
                                             lora->base_path().empty() ? "its seeded base" : lora->base_path()));
    }
    m.kind = fmt::format("fsdp_train checkpoint {} (step {})", dir, reader.manifest().state.step);
    m.config = reader.manifest().model;
    const auto units = model::llama_units(m.config);
    reader.check_model(m.config, units);
    m.params = std::make_unique<InferenceParams>(units);
    for (int u = 0; u < int(units.size()); ++u) reader.read(u, "master", 0, m.params->params(u));
    return m;
  }
  FSDP_FAIL("--checkpoint {}: not a model: expected a Hugging Face Llama folder ({} not found) or an fsdp_train "
            "checkpoint (step_<N>/ with manifest.json, or a checkpoint.dir holding one)",
            path, (fs::path(path) / "config.json").string());
}

// Prints the completion as it grows. sentencepiece decodes a piece differently at the start
// of a text (a leading space is dropped), so the completion is the decoded prompt + output
// minus the decoded prompt, and each step prints what the new token added.
class CompletionPrinter {
 public:
  CompletionPrinter(const data::Tokenizer& tok, std::vector<int32_t> prompt_ids)
      : tok_(tok), ids_(std::move(prompt_ids)), printed_(tok.decode(ids_)) {}

  void add(int32_t id) {
    if (id == tok_.eos_id()) return;
    ids_.push_back(id);
    const std::string text = tok_.decode(ids_);
    // A decode that no longer extends the printed text (an incomplete byte sequence that
    // the next token completes) waits for the next token.
    if (text.size() <= printed_.size() || text.compare(0, printed_.size(), printed_) != 0) return;
    std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
    std::fflush(stdout);
    printed_ = text;
  }

 private:
  const data::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  std::string printed_;
};

int run_generate(const GenerateArgs& a) {
  FSDP_CHECK(fs::exists(a.tokenizer), "--tokenizer {}: no such file", a.tokenizer);
  const data::Tokenizer tok(a.tokenizer);
  LoadedModel m = load_weights(a.checkpoint, a.adapter);
  const model::LlamaConfig& c = m.config;
  spdlog::info("model: {} ({})", m.kind, c.summary());
  FSDP_CHECK(tok.vocab_size() == c.vocab_size,
             "--tokenizer {} has a vocabulary of {} pieces but the model in --checkpoint {} has vocab_size {}",
             a.tokenizer, tok.vocab_size(), a.checkpoint, c.vocab_size);

  std::vector<int32_t> prompt;
  if (tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
  tok.encode(a.prompt, prompt);
  FSDP_CHECK(!prompt.empty(), "--prompt is empty and the tokenizer {} has no BOS to start from", a.tokenizer);
  FSDP_CHECK(int64_t(prompt.size()) <= c.max_seq_len,
             "--prompt is {} tokens{}, more than the model's context of {} (max_seq_len)", prompt.size(),
             tok.bos_id() >= 0 ? " with BOS" : "", c.max_seq_len);
  const int64_t P = int64_t(prompt.size());
  if (P + a.max_new_tokens - 1 > c.max_seq_len)
    spdlog::warn("--max-new-tokens {} after a prompt of {} tokens exceeds the model's context of {}: at most {} new "
                 "tokens",
                 a.max_new_tokens, P, c.max_seq_len, c.max_seq_len - P + 1);
  spdlog::info("prompt: {} tokens; sampling: {}; at most {} new tokens", P, a.sampling.summary(), a.max_new_tokens);

  // The cache holds what this run can reach; the prompt is fed in chunks of at most 256
  // tokens, which bounds the scratch (the [chunk, vocab] logits above all).
  const int64_t max_len = std::clamp<int64_t>(P + a.max_new_tokens - 1, P, c.max_seq_len);
  const Device device = resolve_generate_device(a.device);
  const DType dtype = !a.dtype.empty() ? parse_dtype(a.dtype) : device.is_cpu() ? DType::F32 : DType::BF16;
  FSDP_CHECK(!device.is_cpu() || dtype == DType::F32, "--dtype {} needs a GPU: the CPU computes in float32",
             dtype_name(dtype));
  m.params->move_to(device, dtype);
  spdlog::info("device: {}, {} compute", device.str(), dtype_name(dtype));
  model::LlamaDecoder decoder(c, 1, max_len, std::min<int64_t>(P, 256), dtype, device);
  model::Sampler sampler(a.sampling);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  CompletionPrinter printer(tok, prompt);
  const model::GenerateResult r = model::generate(decoder, *m.params, prompt, sampler, a.max_new_tokens, tok.eos_id(),
                                                  [&](int32_t id) { printer.add(id); });
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const int64_t n = int64_t(r.tokens.size());
  // The first new token comes with the prompt's forward pass; every later one is a decode step.
  const int64_t steps = std::max<int64_t>(n - 1, 0);
  spdlog::info("generated {} tokens ({}): prompt of {} tokens + first token in {:.1f} ms, then {} decode steps in "
               "{:.1f} ms ({:.1f} tokens/s)",
               n, r.hit_eos ? "stopped at EOS" : r.hit_max_len ? "reached the context length" : "max-new-tokens", P,
               1e3 * r.prefill_seconds, steps, 1e3 * r.decode_seconds,
               double(steps) / std::max(r.decode_seconds, 1e-9));
  return 0;
}

}  // namespace

int generate_main(int argc, char** argv) {
  apply_log_level_from_env();  // SPDLOG_LEVEL=debug shows where an error was raised
  GenerateArgs a;
  try {
    a = parse_generate_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "fsdp_train generate: %s (see fsdp_train generate --help)\n", e.message.c_str());
    return 2;
  }
  if (a.help) {
    std::fputs(generate_help(), stdout);
    return 0;
  }
  // stdout carries the text only.
  // (Made once per process: a second generate_main in the same process, as in the tests,
  // reuses it; spdlog refuses two loggers of one name.)
  auto logger = spdlog::get("generate");
  spdlog::set_default_logger(logger ? logger : spdlog::stderr_color_mt("generate"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  try {
    return run_generate(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fsdp_train generate: error: %s\n", e.what());
    log_where(e);
    return 1;
  }
}

}  // namespace fsdp::train
