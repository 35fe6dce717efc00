// `fsdp_train prepare`: the command line over data::prepare_corpus (fsdp/data/prepare.h),
// which turns text / JSONL corpora into tokenized shards and their manifest; Ctrl-C and
// SIGTERM stop it cleanly.
#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iterator>
#include <string>

#include "fsdp/core/cli_args.h"
#include "fsdp/data/prepare.h"

namespace fsdp::cli {

using data::PrepareOptions;
using data::PrepareResult;

const char* prepare_help() {
  return "usage: fsdp_train prepare --tokenizer PATH --output DIR [options] INPUT...\n"
         "       fsdp_train prepare --vocab-size N --output DIR [options] INPUT.jsonl...\n"
         "\n"
         "Tokenizes text corpora (a sentencepiece tokenizer.model or a Hugging Face tokenizer.json)\n"
         "into Megatron-format token shards (DIR/train_00000.{bin,idx}, ..., DIR/val_00000.{bin,idx},\n"
         "...) and DIR/manifest.json.\n"
         "With --vocab-size instead of a tokenizer it packs corpora already tokenized elsewhere\n"
         "(JSONL lines of input_ids: Llama 3's tokenizer, SageMaker model parallel's json.gz, ...).\n"
         "\n"
         "inputs (each optionally compressed: .gz or .zst):\n"
         "  FILE.txt    plain text; each paragraph is a document: paragraphs are separated by one\n"
         "              or more blank lines, a paragraph's lines are joined with newlines\n"
         "  FILE.jsonl  one JSON object per line (FILE.json too: JSON Lines, as SageMaker model\n"
         "              parallel's json.gz) with the document in a string field (--text-field),\n"
         "              or already tokenized: an \"input_ids\" array of token ids, taken as is\n"
         "              (no BOS/EOS added; every id must be below the tokenizer's vocab size)\n"
         "Text documents get the tokenizer's BOS before and EOS after, where the model has them.\n"
         "\n"
         "supervised fine-tuning (when the first line of a JSONL input is an example of these):\n"
         "  {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}   rendered with the chat template\n"
         "  {\"conversations\": [{\"from\": ..., \"value\": ...}]}     ShareGPT, with --sharegpt\n"
         "  {\"prompt\": ..., \"completion\": ...}   {\"instruction\": ..., \"input\": ..., \"output\": ...}\n"
         "  {\"input_ids\": [...], \"labels\": [...]}   pre-tokenized; labels -100 are not trained\n"
         "each example is stored with a loss mask (DIR/train_00000.mask beside the .bin/.idx):\n"
         "only the assistant's turns are trained by default. docs/supervised-fine-tuning.md.\n"
         "  --train-on WHAT         assistant (every assistant turn, its end-of-turn token included),\n"
         "                          last (the last assistant turn), all (every token)\n"
         "  --template NAME         the chat template: the folder's default one unless NAME names\n"
         "                          another of its templates; plain = none: [BOS] prompt completion\n"
         "                          [EOS] (prompt/completion and alpaca only; the default for a\n"
         "                          folder without a chat template)\n"
         "  --sharegpt              accept ShareGPT conversations (from: human/gpt/system/tool)\n"
         "  --max-seq-len N         an example longer than N tokens is cut to its first N (or\n"
         "                          dropped with --overlong drop); 0 = no limit (default)\n"
         "  --overlong WHAT         truncate (default) or drop\n"
         "\n"
         "options:\n"
         "  --tokenizer PATH        a tokenizer.model (sentencepiece), a tokenizer.json (Hugging Face:\n"
         "                          BOS/EOS from tokenizer_config.json beside it), or a model folder\n"
         "                          holding either (tokenizer.json first); special tokens written in\n"
         "                          the text stay text\n"
         "  --vocab-size N          instead of --tokenizer: the inputs are pre-tokenized input_ids,\n"
         "                          each id below N (N > 65536 stores int32 tokens); text is refused\n"
         "  --output DIR            output directory (required); must not exist or be empty\n"
         "  --val-fraction F        fraction of documents sent to the val split, chosen by a\n"
         "                          deterministic hash of each document's index (default 0.01;\n"
         "                          0 = no val split: then set train.eval_every: 0 to train on it)\n"
         "  --text-field NAME       JSONL field holding the text (default text)\n"
         "  --max-bad-fraction F    fail when more than F of all JSONL lines and text paragraphs\n"
         "                          are malformed JSON, too long or not UTF-8 (default 0.001);\n"
         "                          fewer are skipped and reported\n"
         "  --max-line-bytes N      a longer line is a bad line, skipped without being read into\n"
         "                          memory whole (default 67108864, 64 MiB)\n"
         "  --workers N             tokenizer threads, 1 to 1024 (default: every core); the output\n"
         "                          is the same bytes whatever N\n"
         "  --overwrite             replace DIR when it exists and is not empty\n"
         "  --help                  this text\n"
         "\n"
         "A shard holds up to ~256 MiB of tokens; documents are never split across shards.\n"
         "Output is written to DIR.tmp-<pid>/ and renamed to DIR when complete: a failed or\n"
         "interrupted run (Ctrl-C, SIGTERM, SIGHUP) leaves nothing behind. Exit status: 0 done,\n"
         "1 bad input data or tokenizer, 2 usage error, 128 + the signal when interrupted.\n";
}

namespace {

double parse_double(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (const std::exception&) {
  }
  throw UsageError{flag + " needs a number, not '" + v + "'"};
}

// 1% of the documents held out by default: `train` evaluates on the val split (the demo
// configs set train.eval_every), so a corpus made with the defaults can be trained on as is.
constexpr double kDefaultValFraction = 0.01;

PrepareOptions parse_prepare_args(int argc, char** argv, bool& help) {
  PrepareOptions o;
  o.val_fraction = kDefaultValFraction;
  ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.arg();
    auto value = [&] { return args.value(); };
    if (arg == "--help" || arg == "-h") {
      help = true;
    } else if (arg == "--tokenizer") {
      o.tokenizer = value();
    } else if (arg == "--vocab-size") {
      const double v = parse_double(arg, value());
      if (v < 1 || v > double(int64_t(1) << 31) || v != double(int64_t(v)))
        throw UsageError{"--vocab-size needs a whole number in [1, 2^31]"};
      o.vocab_size = int64_t(v);
    } else if (arg == "--output") {
      o.output = value();
    } else if (arg == "--val-fraction") {
      o.val_fraction = parse_double(arg, value());
    } else if (arg == "--text-field") {
      o.text_field = value();
      if (o.text_field.empty())
        throw UsageError{"--text-field needs the name of the JSONL field holding the text, not ''"};
    } else if (arg == "--max-bad-fraction") {
      o.max_bad_fraction = parse_double(arg, value());
    } else if (arg == "--workers") {
      const std::string v = value();
      const double w = parse_double(arg, v);
      if (!(w >= 1 && w <= data::kMaxWorkers) || w != double(int(w)))
        throw UsageError{"--workers needs a whole number from 1 to " + std::to_string(data::kMaxWorkers) + ", not '" +
                         v + "'"};
      o.workers = int(w);
    } else if (arg == "--max-line-bytes") {
      const double n = parse_double(arg, value());
      if (n < 1 || n != double(int64_t(n))) throw UsageError{"--max-line-bytes needs a whole number >= 1"};
      o.max_line_bytes = int64_t(n);
    } else if (arg == "--overwrite" && !args.has_inline_value()) {
      o.overwrite = true;
    } else if (arg == "--sharegpt" && !args.has_inline_value()) {
      o.sft.sharegpt = true;
    } else if (arg == "--train-on") {
      const std::string v = value();
      if (v == "assistant") o.sft.train_on = data::TrainOn::kAssistant;
      else if (v == "last") o.sft.train_on = data::TrainOn::kLast;
      else if (v == "all") o.sft.train_on = data::TrainOn::kAll;
      else throw UsageError{"--train-on needs assistant, last or all, not '" + v + "'"};
    } else if (arg == "--template") {
      o.sft.template_name = value();
      if (o.sft.template_name.empty()) throw UsageError{"--template needs a template name, or plain"};
    } else if (arg == "--max-seq-len") {
      const double n = parse_double(arg, value());
      if (n < 0 || n != double(int64_t(n))) throw UsageError{"--max-seq-len needs a whole number >= 0"};
      o.sft.max_seq_len = int64_t(n);
    } else if (arg == "--overlong") {
      const std::string v = value();
      if (v != "truncate" && v != "drop") throw UsageError{"--overlong needs truncate or drop, not '" + v + "'"};
      o.sft.drop_overlong = v == "drop";
    } else if (arg.starts_with("-") && arg != "-") {
      throw unknown_argument(args.raw(), {"--help", "--tokenizer", "--vocab-size", "--output", "--val-fraction",
                                          "--text-field", "--max-bad-fraction", "--workers", "--max-line-bytes",
                                          "--overwrite", "--sharegpt", "--train-on", "--template", "--max-seq-len",
                                          "--overlong"});
    } else {
      o.inputs.push_back(arg);
    }
  }
  if (help) return o;
  if (o.tokenizer.empty() && o.vocab_size == 0)
    throw UsageError{"--tokenizer MODEL is required (or --vocab-size N for pre-tokenized input_ids)"};
  if (!o.tokenizer.empty() && o.vocab_size != 0)
    throw UsageError{"--tokenizer and --vocab-size exclude each other (the tokenizer defines the vocabulary)"};
  if (o.output.empty()) throw UsageError{"--output DIR is required"};
  if (o.inputs.empty()) throw UsageError{"no input files given"};
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) throw UsageError{"--val-fraction must be in [0, 1)"};
  if (!(o.max_bad_fraction >= 0 && o.max_bad_fraction <= 1)) throw UsageError{"--max-bad-fraction must be in [0, 1]"};
  return o;
}

// Ctrl-C, SIGTERM and SIGHUP stop the run between batches, and its temporary directory is
// removed on the way out; a second signal exits at once.
std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) {
  if (g_stop_signal.exchange(sig) == 0) return;  // async-signal-safe: an atomic, then _exit
  ::_exit(128 + sig);
}

// Installs the handlers for the run and gives the previous ones back at the end (prepare_command
// also runs inside other programs: the tests). A signal the caller ignores (nohup, a
// background job's SIGINT) stays ignored.
class StopHandlers {
 public:
  StopHandlers() {
    g_stop_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      sigaction(kSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~StopHandlers() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[std::size(kSignals)] {};
};

}  // namespace

int prepare_command(int argc, char** argv) {
  apply_log_level_from_env();  // SPDLOG_LEVEL=debug shows where an error was raised
  bool help = false;
  PrepareOptions o;
  try {
    o = parse_prepare_args(argc, argv, help);
  } catch (const UsageError& e) {
    print_usage_error("prepare", e.message);
    return 2;
  }
  if (help) {
    std::fputs(prepare_help(), stdout);
    return 0;
  }
  const StopHandlers handlers;
  o.stop_signal = &g_stop_signal;
  try {
    const PrepareResult r = data::prepare_corpus(o);
    const double mb = double(r.input_bytes) / 1e6;
    const int64_t tokens = r.train.tokens + r.val.tokens;
    std::printf("prepared %s: %zu input(s), %.1f MB of text in %.2f s (%.2f MB/s, %.0f tokens/s)\n", r.output.c_str(),
                o.inputs.size(), mb, r.seconds, mb / std::max(r.seconds, 1e-9), double(tokens) / std::max(r.seconds, 1e-9));
    std::printf("  train: %lld documents, %lld tokens, %zu shard(s)\n", (long long)r.train.documents,
                (long long)r.train.tokens, r.train.shards.size());
    std::printf("  val:   %lld documents, %lld tokens, %zu shard(s)\n", (long long)r.val.documents,
                (long long)r.val.tokens, r.val.shards.size());
    if (r.sft) {
      std::string formats;
      for (int f = 0; f < data::kSftFormats; ++f) {
        if (r.sft_examples[f] > 0)
          formats += (formats.empty() ? "" : ", ") + std::to_string(r.sft_examples[f]) + " " +
                     data::sft_format_name(data::SftFormat(f));
      }
      std::printf("  sft:   %s examples (template %s, --train-on %s); trained tokens: train %lld of %lld, val %lld of "
                  "%lld; %lld truncated, %lld dropped (--max-seq-len %lld)\n",
                  formats.empty() ? "no" : formats.c_str(), r.sft_template.c_str(), data::train_on_name(o.sft.train_on),
                  (long long)r.train.trained_tokens, (long long)r.train.tokens, (long long)r.val.trained_tokens,
                  (long long)r.val.tokens, (long long)r.truncated, (long long)r.dropped, (long long)o.sft.max_seq_len);
    }
    if (r.val.documents == 0) {
      std::printf("  no validation split (--val-fraction %g drew no document): a run that evaluates needs one; "
                  "train.eval_every: 0 trains without, or raise --val-fraction\n",
                  o.val_fraction);
    }
    if (r.bad_lines > 0) {
      std::printf("  skipped %lld malformed, over-long or non-UTF-8 line(s) of %lld; the first:\n",
                  (long long)r.bad_lines,
                  (long long)(r.jsonl_lines + r.text_records));
      for (const std::string& e : r.bad_examples) std::printf("    %s\n", e.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    report_error("prepare", e);
    return g_stop_signal.load() != 0 ? 128 + g_stop_signal.load() : 1;
  }
}

}  // namespace fsdp::cli
