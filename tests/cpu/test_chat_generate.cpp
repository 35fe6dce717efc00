// `fsdp_train generate --chat` against transformers (tests/golden/chat_generate/expected.json,
// from tests/golden/generate_chat_generate.py): the prompt ids of apply_chat_template(...,
// add_generation_prompt=True, tokenize=True) for a Llama 3 template and the Llama 2 chat and
// Mistral instruct templates, and greedy generate() on a tiny Llama 3-style model that stops at
// <|eot_id|> (exact ids: the fixture's smallest top-2 logit margin, 1.5e-3, is ~30x a float32
// model's logit error); the template's end-of-turn token of each kind of template; the model
// folder's eos_token_id; and the command line: the reply alone, a --messages file in and out,
// a base model refused, each usage error with its exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/generation_config.h"
#include "fsdp/data/chat_prompt.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/train/chat_generate.h"
#include "fsdp/train/inference_model.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const json& expected() {
  static const json j = [] {
    std::ifstream in(test::source_path("tests/golden/chat_generate/expected.json"));
    return json::parse(in);
  }();
  return j;
}

std::string model_dir() { return test::source_path("tests/golden/chat_generate/llama3_chat_tiny"); }
std::string llama3_tokenizer() { return test::source_path("tests/golden/tokenizers/llama3_chat"); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

// A unique scratch folder per test, removed at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / ("fsdp_chat_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

TEST(ChatPromptGolden, IdsEqualTransformersApplyChatTemplate) {
  int cases = 0;
  for (const json& c : expected()["prompts"]) {
    const data::Tokenizer tok(test::source_path(c["tokenizer"].get<std::string>()));
    const std::string tmpl = c["chat_template"].is_null() ? "" : test::source_path(c["chat_template"].get<std::string>());
    const data::ChatPrompt prompt(tok, data::chat_template_for(tok, tmpl));
    const std::vector<int32_t> ids = prompt.ids(c["messages"]);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << c["text"].get<std::string>();
    // One BOS where the template writes one, two where it writes two (Llama 2's every turn):
    // never a second one added in front.
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.bos_id()), c["bos_count"].get<int64_t>());
    ++cases;
  }
  EXPECT_EQ(cases, 8);
}

TEST(ChatPromptGolden, EndOfTurnIsTheTokenTheTemplateClosesAnAnswerWith) {
  struct Case {
    std::string tokenizer, tmpl, token;
  };
  const std::string sources = test::source_path("tests/golden/chat_templates/sources/");
  for (const Case& c : {Case{llama3_tokenizer(), "", "<|eot_id|>"},
                        Case{test::source_path("tests/golden/tokenizers/qwen2_chat"), "", "<|im_end|>"},
                        Case{test::source_path("tests/golden/tokenizers/llama2_legacy"), sources + "llama2_chat.jinja", "</s>"},
                        Case{test::source_path("tests/golden/tokenizers/llama2_legacy"),
                             sources + "mistral_instruct_v01.jinja", "</s>"}}) {
    const data::Tokenizer tok(c.tokenizer);
    const data::ChatPrompt prompt(tok, data::chat_template_for(tok, c.tmpl));
    ASSERT_EQ(prompt.end_of_turn_ids().size(), 1u) << c.tokenizer << " " << c.tmpl;
    EXPECT_EQ(tok.decode(prompt.end_of_turn_ids(), /*skip_special=*/false), c.token) << c.tokenizer << " " << c.tmpl;
  }
}

// The library path: the same ids as transformers' greedy generate(), the stop token included,
// and the reply decoded as decode(generated, skip_special_tokens=True).
TEST(ChatGenerateGolden, GreedyRepliesEqualTransformersAndStopAtEndOfTurn) {
  const data::Tokenizer tok(llama3_tokenizer());
  const data::ChatPrompt prompt(tok, data::chat_template_for(tok, ""));
  train::InferenceModel m = train::load_inference_model(model_dir(), "");
  m.params->move_to(Device::cpu(), DType::F32);
  const train::ChatStops stops = train::chat_stop_ids(prompt, tok, model_dir(), m.config.vocab_size);
  // generation_config.json's list in its order, the template's <|eot_id|> folded into it.
  EXPECT_EQ(stops.ids, expected()["eos_token_id"].get<std::vector<int32_t>>());
  model::LlamaDecoder decoder(m.config, 1, m.config.max_seq_len, 64, DType::F32, Device::cpu());
  model::Sampler greedy(model::SamplingOptions{.temperature = 0});
  int cases = 0;
  for (const json& c : expected()["greedy"]) {
    const std::vector<int32_t> ids = prompt.ids(c["messages"]);
    ASSERT_EQ(ids, c["prompt_ids"].get<std::vector<int32_t>>());
    std::string streamed;
    const train::ChatReply r = train::generate_reply(decoder, *m.params, prompt, ids, greedy,
                                                     c["max_new_tokens"].get<int64_t>(), stops,
                                                     [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(r.result.tokens, c["expected_ids"].get<std::vector<int32_t>>());
    EXPECT_TRUE(r.result.hit_eos);
    EXPECT_EQ(r.text, c["reply"].get<std::string>());
    EXPECT_EQ(streamed, r.text);
    ++cases;
  }
  EXPECT_EQ(cases, 2);
}

TEST(ChatGenerate, EosTokenIdsFromGenerationConfigElseConfig) {
  Scratch s;
  EXPECT_TRUE(ckpt::hf_eos_token_ids(s.dir.string()).empty());
  write(s.dir / "config.json", R"({"eos_token_id": 2})");
  EXPECT_EQ(ckpt::hf_eos_token_ids(s.dir.string()), std::vector<int32_t>{2});
  write(s.dir / "generation_config.json", R"({"eos_token_id": [128001, 128009]})");
  EXPECT_EQ(ckpt::hf_eos_token_ids(s.dir.string()), (std::vector<int32_t>{128001, 128009}));
  write(s.dir / "generation_config.json", R"({"eos_token_id": null})");
  EXPECT_EQ(ckpt::hf_eos_token_ids(s.dir.string()), std::vector<int32_t>{2});
  write(s.dir / "generation_config.json", R"({"eos_token_id": [1, "</s>"]})");
  const std::string dir = s.dir.string();
  test::expect_error([&] { ckpt::hf_eos_token_ids(dir); }, {"generation_config.json", "'eos_token_id'", "the string"},
                     "a name in the list");
  write(s.dir / "generation_config.json", R"({"eos_token_id": -1})");
  test::expect_error([&] { ckpt::hf_eos_token_ids(dir); }, {"generation_config.json", "'eos_token_id'", "-1"},
                     "a negative id");
  write(s.dir / "generation_config.json", "{not json");
  test::expect_error([&] { ckpt::hf_eos_token_ids(dir); }, {"generation_config.json", "not valid JSON"}, "not JSON");
}

// ---- the command line -------------------------------------------------------------------

struct CliRun {
  int code = -1;
  std::string out, err;
};

CliRun run(const Scratch& s, const std::string& args) {
  const fs::path out = s.dir / "stdout", err = s.dir / "stderr";
  const std::string cmd =
      std::string(FSDP_TRAIN_BIN) + " generate " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return CliRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A Hugging Face folder as users have it: the weights with the tokenizer and template beside them.
fs::path model_with_tokenizer(const Scratch& s, const std::string& tokenizer_dir) {
  const fs::path m = s.dir / "model";
  fs::create_directories(m);
  for (const auto& e : fs::directory_iterator(model_dir())) fs::copy_file(e.path(), m / e.path().filename());
  for (const auto& e : fs::directory_iterator(tokenizer_dir)) fs::copy_file(e.path(), m / e.path().filename());
  return m;
}

TEST(ChatGenerateCli, PrintsTheReplyAloneFromTheModelFolder) {
  Scratch s;
  const json& c = expected()["greedy"][0];
  const fs::path m = model_with_tokenizer(s, llama3_tokenizer());
  const CliRun r = run(s, "--checkpoint " + m.string() + " --chat --system " +
                              quoted(c["messages"][0]["content"].get<std::string>()) + " --user " +
                              quoted(c["messages"][1]["content"].get<std::string>()) + " --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, c["reply"].get<std::string>() + "\n");
  EXPECT_NE(r.err.find("1 stopped at an end of turn"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("<|eot_id|> (3009: generation_config.json"), std::string::npos) << r.err;
}

TEST(ChatGenerateCli, MessagesFileGetsEachConversationBackWithItsReply) {
  Scratch s;
  std::string lines;
  for (const json& c : expected()["greedy"]) lines += json{{"id", lines.size()}, {"messages", c["messages"]}}.dump() + "\n\n";
  write(s.dir / "in.jsonl", lines);
  const CliRun r = run(s, "--checkpoint " + model_dir() + " --tokenizer " + llama3_tokenizer() + " --chat --messages " +
                              (s.dir / "in.jsonl").string() + " --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream out(r.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line); ++i) {
    ASSERT_LT(i, expected()["greedy"].size()) << r.out;
    const json& c = expected()["greedy"][i];
    const json got = json::parse(line);
    EXPECT_TRUE(got.contains("id"));  // the line's other keys come back
    json want = c["messages"];
    want.push_back({{"role", "assistant"}, {"content", c["reply"]}});
    EXPECT_EQ(got["messages"], want);
  }
  EXPECT_EQ(i, expected()["greedy"].size());
}

TEST(ChatGenerateCli, BaseModelWithoutTemplateIsRefusedNamingTheFile) {
  Scratch s;
  const fs::path m = model_with_tokenizer(s, test::source_path("tests/golden/tokenizers/llama3_style"));
  const CliRun r = run(s, "--checkpoint " + m.string() + " --chat --user hi");
  EXPECT_EQ(r.code, 1) << r.err;
  for (const std::string& want : {(m / "tokenizer_config.json").string(), std::string("has none (no chat_template.jinja"),
                                  std::string("--prompt TEXT without --chat"), std::string("--chat-template")})
    EXPECT_NE(r.err.find(want), std::string::npos) << want << " in\n" << r.err;
  // --chat-template supplies one: the Llama 3 template, rendered with that folder's tokens.
  write(s.dir / "t.jinja", "{{ bos_token }}{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}");
  const CliRun t = run(s, "--checkpoint " + m.string() + " --chat --user hi --chat-template " +
                              (s.dir / "t.jinja").string() + " --temperature 0 --max-new-tokens 3");
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.err.find("chat template: " + (s.dir / "t.jinja").string()), std::string::npos) << t.err;
}

TEST(ChatGenerateCli, BadInputExitsWithOneLineNamingTheFlagOrLine) {
  Scratch s;
  const std::string m = "--checkpoint " + model_dir() + " --tokenizer " + llama3_tokenizer();
  struct Case {
    std::string args;
    int code;
    std::string mention;
  };
  write(s.dir / "bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n{\"messages\": [}\n");
  write(s.dir / "answered.jsonl",
        "\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
  write(s.dir / "norole.jsonl", "{\"messages\": [{\"content\": \"hi\"}]}\n");
  write(s.dir / "empty.jsonl", "\n");
  const std::string bad = (s.dir / "bad.jsonl").string(), answered = (s.dir / "answered.jsonl").string();
  for (const Case& c : {Case{m + " --user hi", 2, "--system/--user/--assistant needs --chat"},
                        Case{m + " --chat", 2, "--chat needs a conversation"},
                        Case{m + " --chat --prompt hi --user hi", 2, "--prompt is plain text"},
                        Case{m + " --chat --user hi --assistant yo", 2, "ends with --assistant"},
                        Case{m + " --chat --user hi --messages " + bad, 2, "use one"},
                        Case{m + " --chat --messages " + (s.dir / "none.jsonl").string(), 2, "--messages"},
                        Case{m + " --chat --user hi --chat-template " + (s.dir / "none.jinja").string(), 2,
                             "--chat-template"},
                        Case{m + " --chat --messages " + bad, 1, bad + ":2: not a JSON object"},
                        Case{m + " --chat --messages " + answered, 1, answered + ":2: the last message is the assistant's"},
                        Case{m + " --chat --messages " + (s.dir / "norole.jsonl").string(), 1, ":1: messages[0] has no string \"role\""},
                        Case{m + " --chat --messages " + (s.dir / "empty.jsonl").string(), 1, "holds no conversation"}}) {
    const CliRun r = run(s, c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mention), std::string::npos) << c.mention << " in\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line, no log before it
  }
}

}  // namespace
}  // namespace fsdp
