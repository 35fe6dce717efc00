// `fsdp_train tokenize --tokenizer PATH`: what the model sees. Reads one input per line from
// stdin and prints one line per input: its ids as the `tokenizers` library's encode(text)
// gives them (the post-processor's special tokens included, special tokens written in the
// text parsed), with --decode the text of a line of ids as a JSON string, and with --chat a
// conversation rendered by the folder's chat template (fsdp/chat/chat_template.h) and
// tokenized as transformers' apply_chat_template(tokenize=True) does.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "fsdp/chat/chat_template.h"
#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/train/exit_codes.h"

namespace fsdp::cli {

using train::kExitError;
using train::kExitOk;
using train::kExitUsage;

const char* tokenize_help() {
  return "usage: fsdp_train tokenize --tokenizer PATH [options] < INPUT\n"
         "\n"
         "Prints, for each line of stdin, the token ids the tokenizer makes of it, space-separated,\n"
         "as Hugging Face tokenizers' encode(text) gives them: the tokenizer's special tokens around\n"
         "the text (Llama 3's <|begin_of_text|>, sentencepiece's BOS) and special tokens written in\n"
         "the text parsed. (`prepare` never parses them: corpus text stays text.)\n"
         "\n"
         "options:\n"
         "  --tokenizer PATH   a tokenizer.model (sentencepiece), a tokenizer.json (Hugging Face), or a\n"
         "                     model folder holding either (tokenizer.json first) (required)\n"
         "  --json             each input line is a JSON string (inputs can hold newlines)\n"
         "  --no-special       no special tokens around the text (add_special_tokens=False)\n"
         "  --split-special    special tokens written in the text are text, as `prepare` encodes\n"
         "  --decode           each input line is space-separated ids; print their text as a JSON\n"
         "                     string (special tokens dropped, as decode(ids) does; --keep-special\n"
         "                     keeps them)\n"
         "  --chat             each input line is a JSON list of messages ({\"role\": ..., \"content\": ...});\n"
         "                     render it with the chat template of the tokenizer's folder\n"
         "                     (chat_template.jinja or tokenizer_config.json) and print its ids, as\n"
         "                     transformers' apply_chat_template(messages, tokenize=True)\n"
         "  --add-generation-prompt   with --chat: end with the assistant's turn header\n"
         "  --render           with --chat: print the rendered text as a JSON string instead of ids\n"
         "  --template NAME    with --chat: a named template of the folder (e.g. tool_use)\n"
         "\n"
         "Exit status: 0 done, 1 a bad input line or tokenizer (named with its line number),\n"
         "2 usage error.\n";
}

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool json = false, decode = false, keep_special = false;
  bool chat = false, add_generation_prompt = false, render = false;
  std::string template_name;
  data::EncodeOptions encode{.add_special = true, .parse_special = true};
};

TokenizeArgs parse(int argc, char** argv, bool& help) {
  TokenizeArgs a;
  ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& arg = args.arg();
    if (arg == "--help" || arg == "-h") help = true;
    else if (arg == "--tokenizer") a.tokenizer = args.value();
    else if (arg == "--json") a.json = true;
    else if (arg == "--no-special") a.encode.add_special = false;
    else if (arg == "--split-special") a.encode.parse_special = false;
    else if (arg == "--decode") a.decode = true;
    else if (arg == "--keep-special") a.keep_special = true;
    else if (arg == "--chat") a.chat = true;
    else if (arg == "--add-generation-prompt") a.add_generation_prompt = true;
    else if (arg == "--render") a.render = true;
    else if (arg == "--template") a.template_name = args.value();
    else
      throw unknown_argument(args.raw(), {"--help", "--tokenizer", "--json", "--no-special", "--split-special", "--decode",
                                          "--keep-special", "--chat", "--add-generation-prompt", "--render",
                                          "--template"});
  }
  if (help) return a;
  if (a.tokenizer.empty()) throw UsageError{"--tokenizer PATH is required"};
  if (a.keep_special && !a.decode) throw UsageError{"--keep-special is for --decode"};
  if (a.decode && (a.json || !a.encode.add_special || !a.encode.parse_special))
    throw UsageError{"--decode reads ids: --json, --no-special and --split-special are for encoding"};
  if (a.chat && (a.decode || a.json || !a.encode.add_special || !a.encode.parse_special))
    throw UsageError{"--chat reads JSON lists of messages: --decode, --json, --no-special and --split-special do not apply"};
  if (!a.chat && (a.add_generation_prompt || a.render || !a.template_name.empty()))
    throw UsageError{"--add-generation-prompt, --render and --template are for --chat"};
  return a;
}

std::vector<int32_t> parse_ids(const std::string& line, size_t line_no) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(line.substr(i), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FSDP_CHECK(used > 0 && v >= 0 && v < (1LL << 31), "stdin line {}: expected space-separated token ids, found '{}'",
               line_no, line.substr(i, 20));
    ids.push_back(int32_t(v));
    i += used;
  }
  return ids;
}

// The chat template of the folder the tokenizer came from.
chat::ChatTemplate folder_template(const data::Tokenizer& tok, const std::string& name) {
  return chat::ChatTemplate::from_model_dir(std::filesystem::path(tok.path()).parent_path().string(), name);
}

// One conversation: rendered, then (unless --render) tokenized as apply_chat_template does:
// the rendered text holds its special tokens, so they are parsed and none are added.
std::string chat_line(const chat::ChatTemplate& t, const data::Tokenizer& tok, const TokenizeArgs& a,
                      const std::string& line, size_t line_no) {
  nlohmann::ordered_json messages;
  try {
    messages = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception&) {
    FSDP_FAIL("stdin line {}: not JSON (--chat reads one JSON list of messages per line)", line_no);
  }
  FSDP_CHECK(messages.is_array(), "stdin line {}: expected a JSON list of messages, found {}", line_no,
             messages.type_name());
  std::string text;
  try {
    text = t.render(messages, a.add_generation_prompt).text;
  } catch (const std::exception& e) {
    FSDP_FAIL("stdin line {}: {}", line_no, e.what());
  }
  if (a.render) return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<int32_t> ids;
  tok.encode(text, {.add_special = false, .parse_special = true}, ids);
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) out += (k ? " " : "") + std::to_string(ids[k]);
  return out;
}

int run(const TokenizeArgs& a) {
  const data::Tokenizer tok(a.tokenizer);
  std::optional<chat::ChatTemplate> chat_template;
  if (a.chat) chat_template = folder_template(tok, a.template_name);
  std::string line, out;
  std::vector<int32_t> ids;
  for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (a.chat) {
      out = chat_line(*chat_template, tok, a, line, line_no);
    } else if (a.decode) {
      const std::vector<int32_t> in = parse_ids(line, line_no);
      std::string text;
      try {
        text = tok.decode(in, !a.keep_special);
      } catch (const Error& e) {
        FSDP_FAIL("stdin line {}: {}", line_no, e.what());
      }
      out = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      std::string text = line;
      if (a.json) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception&) {
          FSDP_FAIL("stdin line {}: not a JSON string (--json reads one per line)", line_no);
        }
        FSDP_CHECK(j.is_string(), "stdin line {}: expected a JSON string, found {}", line_no, j.type_name());
        text = j.get<std::string>();
      }
      ids.clear();
      tok.encode(text, a.encode, ids);
      out.clear();
      for (size_t k = 0; k < ids.size(); ++k) out += (k ? " " : "") + std::to_string(ids[k]);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

int tokenize_command(int argc, char** argv) {
  apply_log_level_from_env();
  // stdout carries the ids alone; every log line goes to stderr. (Made once per process: a
  // second tokenize_command in the same process reuses it; spdlog refuses two loggers of one
  // name.)
  auto logger = spdlog::get("tokenize");
  spdlog::set_default_logger(logger ? logger : spdlog::stderr_color_mt("tokenize"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  TokenizeArgs a;
  try {
    bool help = false;
    a = parse(argc, argv, help);
    if (help) {
      std::fputs(tokenize_help(), stdout);
      return kExitOk;
    }
  } catch (const UsageError& e) {
    print_usage_error("tokenize", e.message);
    return kExitUsage;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    report_error("tokenize", e);
    return kExitError;
  }
}

}  // namespace fsdp::cli
