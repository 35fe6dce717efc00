// `fsdp_train generate`: text generation from a trained or imported model, so a user sees
// what the model learned. Loads the weights (fsdp/train/inference_model.h), encodes the
// prompt with a sentencepiece model (BOS first where it has one), runs the generation loop
// of model/generate.h and prints the prompt followed by the completion on stdout as it is
// generated; log lines go to stderr. Sampling: temperature / top-k / top-p, greedy at
// temperature 0, seeded (model/sampling.h). --chat replies to a conversation instead
// (generate_chat_command.cpp).
#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"

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

#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/model/generate.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/model/sampling.h"
#include "fsdp/train/checkpoint_export.h"
#include "fsdp/train/inference_model.h"
#include "generate_args.h"

namespace fsdp::cli {

namespace fs = std::filesystem;

const char* generate_help() {
  return "usage: fsdp_train generate --checkpoint DIR [--tokenizer PATH] --prompt TEXT [options]\n"
         "       fsdp_train generate --checkpoint DIR --chat [--system TEXT] --user TEXT [options]\n"
         "       fsdp_train generate --checkpoint DIR --chat --messages FILE.jsonl [options]\n"
         "\n"
         "Prints TEXT followed by the model's completion of it; with --chat, the assistant's reply to\n"
         "the conversation only (log lines go to stderr).\n"
         "\n"
         "options:\n"
         "  --checkpoint DIR        the model (required): a Hugging Face Llama folder (config.json\n"
         "                          plus *.safetensors), an fsdp_train checkpoint (step_<N>/), or a\n"
         "                          checkpoint.dir, whose newest complete checkpoint is used\n"
         "                          (a LoRA checkpoint runs with its adapters merged into its base)\n"
         "  --adapter DIR           a PEFT LoRA adapter folder to merge into the --checkpoint Hugging\n"
         "                          Face folder (its base; a bitsandbytes 4-bit one is dequantized)\n"
         "  --base DIR              a LoRA checkpoint's base folder, if it moved since training\n"
         "                          (default: the one the checkpoint records; its bytes must be the\n"
         "                          ones trained on)\n"
         "  --tokenizer PATH        the model's tokenizer: a tokenizer.model (sentencepiece), a\n"
         "                          tokenizer.json (Hugging Face) or a folder holding either; default:\n"
         "                          the one `fsdp_train prepare` recorded for the checkpoint's run\n"
         "                          (as export finds it), or a Hugging Face folder's own. The prompt\n"
         "                          gets its BOS first where the tokenizer defines one; special\n"
         "                          tokens written in the prompt stay text\n"
         "  --prompt TEXT           the text to continue (required; may be empty when the\n"
         "                          tokenizer has a BOS)\n"
         "\n"
         "chat (an instruction-tuned model; the conversation rendered with the tokenizer folder's chat\n"
         "template and add_generation_prompt, as transformers' apply_chat_template):\n"
         "  --chat                  reply to a conversation instead of continuing --prompt; the reply\n"
         "                          stops at the template's end-of-turn token (<|eot_id|>, </s>,\n"
         "                          <|im_end|>), the eos_token_id of the folder's generation_config.json\n"
         "                          (else config.json) and the tokenizer's EOS, and is printed without\n"
         "                          special tokens\n"
         "  --system TEXT, --user TEXT, --assistant TEXT\n"
         "                          the conversation's turns, in the order given (repeat them for several\n"
         "                          turns; --assistant for earlier replies); it must end with --user\n"
         "  --messages FILE.jsonl   conversations, one per line as `prepare` takes them:\n"
         "                          {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}; each line\n"
         "                          is printed back with the reply appended as an assistant message\n"
         "                          (JSONL out; the model is loaded once for all of them)\n"
         "  --chat-template FILE    a Jinja template to use instead of the folder's (as vLLM's\n"
         "                          --chat-template); a folder without one is refused, naming it\n"
         "\n"
         "  --max-new-tokens N      generate at most N tokens (default 64); generation also stops\n"
         "                          after the tokenizer's EOS and at the model's context length\n"
         "  --temperature T         softmax temperature, 0 = greedy (default 0.8; below 1e-6 greedy too)\n"
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
         "vocabularies differ, no chat template, a bad --messages line), 2 usage error.\n";
}

namespace {

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
    } else if (arg == "--base") {
      a.base = value();
    } else if (arg == "--prompt") {
      a.prompt = value();
      a.has_prompt = true;
    } else if (arg == "--chat") {
      a.chat = true;
    } else if (arg == "--system" || arg == "--user" || arg == "--assistant") {
      a.turns.emplace_back(arg.substr(2), value());
    } else if (arg == "--messages") {
      a.messages_file = value();
    } else if (arg == "--chat-template") {
      a.chat_template = value();
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
      throw unknown_argument(args.raw(), {"--help", "--checkpoint", "--tokenizer", "--adapter", "--base", "--prompt",
                                          "--chat", "--system", "--user", "--assistant", "--messages", "--chat-template",
                                          "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                          "--device", "--dtype"});
    }
  }
  if (a.help) return a;
  if (a.checkpoint.empty()) throw UsageError{"--checkpoint DIR is required"};
  const bool chat_input = !a.turns.empty() || !a.messages_file.empty() || !a.chat_template.empty();
  if (a.chat) {
    if (a.has_prompt)
      throw UsageError{"--prompt is plain text to continue; with --chat give the conversation as --system/--user "
                       "TEXT or --messages FILE.jsonl"};
    if (a.turns.empty() == a.messages_file.empty())
      throw UsageError{a.turns.empty() ? "--chat needs a conversation: --user TEXT (with --system TEXT before it, "
                                         "--assistant TEXT for earlier replies) or --messages FILE.jsonl"
                                       : "--messages FILE and --system/--user/--assistant are two ways to give the "
                                         "conversation: use one"};
    if (!a.turns.empty() && a.turns.back().first == "assistant")
      throw UsageError{"the conversation ends with --assistant: there is nothing to reply to; end it with --user TEXT"};
  } else {
    if (chat_input)
      throw UsageError{std::string(!a.turns.empty() ? "--system/--user/--assistant" : !a.messages_file.empty()
                                                                                        ? "--messages"
                                                                                        : "--chat-template") +
                       " needs --chat (a conversation rendered with the model's chat template)"};
    if (!a.has_prompt) throw UsageError{"--prompt TEXT is required (or --chat with --user TEXT)"};
  }
  if (!a.base.empty() && !a.adapter.empty())
    throw UsageError{"--base is for a LoRA checkpoint; with --adapter, --checkpoint is the base folder"};
  // What is not there is the command line's error (exit 2), found before anything loads.
  std::error_code ec;
  if (!fs::exists(a.checkpoint, ec)) throw UsageError{"--checkpoint " + a.checkpoint + ": no such checkpoint or folder"};
  if (a.tokenizer.empty()) {
    a.tokenizer = train::run_tokenizer(a.checkpoint);
    if (a.tokenizer.empty())
      throw UsageError{"--tokenizer PATH is required: " + a.checkpoint +
                       " names no tokenizer (neither a tokenizer.json or tokenizer.model in it nor one that "
                       "`fsdp_train prepare` recorded for its run's data.path)"};
  } else if (!fs::exists(a.tokenizer, ec)) {
    throw UsageError{"--tokenizer " + a.tokenizer + ": no such file or folder"};
  } else if (!fs::is_regular_file(a.tokenizer, ec) && !fs::is_directory(a.tokenizer, ec)) {
    throw UsageError{"--tokenizer " + a.tokenizer + ": not a regular file or a folder"};
  }
  if (!a.messages_file.empty() && !fs::exists(a.messages_file, ec))
    throw UsageError{"--messages " + a.messages_file + ": no such file"};
  if (!a.chat_template.empty() && !fs::exists(a.chat_template, ec))
    throw UsageError{"--chat-template " + a.chat_template + ": no such file"};
  if (a.device == "cpu" && !a.dtype.empty() && a.dtype != "float32")
    throw UsageError{"--dtype " + a.dtype + " needs --device cuda: the CPU computes in float32"};
  return a;
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
  GenerationModel g = load_generation_model(a, load_generation_tokenizer(a));
  const data::Tokenizer& tok = g.tok;
  train::InferenceModel& m = g.m;
  const model::LlamaConfig& c = m.config;
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
  model::LlamaDecoder decoder(c, 1, max_len, std::min<int64_t>(P, 256), g.dtype, g.device);
  // Route as training did: a checkpoint of a run that balanced its experts by bias.
  if (!m.router_bias.empty()) decoder.router_bias()->set(m.router_bias);
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

data::Tokenizer load_generation_tokenizer(const GenerateArgs& a) {
  std::error_code ec;
  FSDP_CHECK(fs::exists(a.tokenizer, ec), "--tokenizer {}: no such file{}", a.tokenizer, ec ? ": " + ec.message() : "");
  data::Tokenizer tok(a.tokenizer);
  spdlog::info("tokenizer: {}", tok.path());
  return tok;
}

GenerationModel load_generation_model(const GenerateArgs& a, data::Tokenizer tok) {
  train::InferenceModel m = train::load_inference_model(a.checkpoint, a.adapter, a.base);
  const model::LlamaConfig& c = m.config;
  spdlog::info("model: {} ({})", m.kind, c.summary());
  // A Hugging Face model may pad its embedding past the tokenizer's ids (Qwen2: 151936 rows for
  // 151665 tokens); a sentencepiece model and its Llama have the same size.
  const bool fits = tok.kind() == data::Tokenizer::Kind::HuggingFace ? tok.vocab_size() <= c.vocab_size
                                                                    : tok.vocab_size() == c.vocab_size;
  FSDP_CHECK(fits, "--tokenizer {} has a vocabulary of {} pieces but the model in --checkpoint {} has vocab_size {}",
             tok.path(), tok.vocab_size(), a.checkpoint, c.vocab_size);
  const Device device = train::resolve_inference_device(a.device);
  const DType dtype = !a.dtype.empty() ? parse_dtype(a.dtype) : device.is_cpu() ? DType::F32 : DType::BF16;
  FSDP_CHECK(!device.is_cpu() || dtype == DType::F32, "--dtype {} needs a GPU: the CPU computes in float32",
             dtype_name(dtype));
  m.params->move_to(device, dtype);
  spdlog::info("device: {}, {} compute", device.str(), dtype_name(dtype));
  return GenerationModel{std::move(tok), std::move(m), device, dtype};
}

int generate_command(int argc, char** argv) {
  apply_log_level_from_env();  // SPDLOG_LEVEL=debug shows where an error was raised
  GenerateArgs a;
  try {
    a = parse_generate_args(argc, argv);
  } catch (const UsageError& e) {
    print_usage_error("generate", e.message);
    return 2;
  }
  if (a.help) {
    std::fputs(generate_help(), stdout);
    return 0;
  }
  // stdout carries the text only.
  // (Made once per process: a second generate_command in the same process, as in the tests,
  // reuses it; spdlog refuses two loggers of one name.)
  auto logger = spdlog::get("generate");
  spdlog::set_default_logger(logger ? logger : spdlog::stderr_color_mt("generate"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  try {
    return a.chat ? run_generate_chat(a) : run_generate(a);
  } catch (const std::exception& e) {
    report_error("generate", e);
    return 1;
  }
}

}  // namespace fsdp::cli
