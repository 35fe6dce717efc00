// Hugging Face tokenizer.json (src/data/hf/) against the `tokenizers` library, token for token:
// tests/golden/tokenizers holds six tokenizers of the shapes real models ship (Llama 3's
// Split + ByteLevel with its special tokens and template, Llama 2's files in both of the
// layouts transformers writes, GPT-2's ByteLevel, Qwen2's NFC + regex, and one that uses every
// other supported piece) and what tokenizers 0.21.0 makes of a corpus of English, Korean,
// Chinese, Arabic, emoji with ZWJ sequences, code with tabs and long whitespace runs, digit
// runs, CRLF, NUL, invalid UTF-8 and special tokens written in the text
// (tests/golden/generate_tokenizers.py). Every id and every decoded byte must be equal.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/chat/chat_template.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string golden(const std::string& rel) { return test::source_path("tests/golden/tokenizers/" + rel); }

const json& cases() {
  static const json c = [] {
    std::ifstream f(golden("cases.json"));
    return json::parse(f);
  }();
  return c;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

// A scratch folder of this test alone: ctest runs the tests of this file in parallel.
fs::path scratch(const std::string& what) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return fs::temp_directory_path() /
         ("fsdp_" + what + "_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, EncodeAndDecodeAsTokenizersDoes) {
  const std::string name = GetParam();
  const data::Tokenizer tok(golden(name));  // the folder: its tokenizer.json
  ASSERT_EQ(tok.kind(), data::Tokenizer::Kind::HuggingFace);
  int checked = 0;
  for (const json& c : cases()["cases"]) {
    const std::string text = from_hex(c["hex"].get<std::string>());
    const json& want = c[name];
    SCOPED_TRACE(name + " / " + c["name"].get<std::string>());
    std::vector<int32_t> plain, ids, parsed;
    tok.encode(text, plain);  // pieces only: no post-processor, special tokens are text
    tok.encode(text, {.add_special = true, .parse_special = true}, ids);
    tok.encode(text, {.add_special = false, .parse_special = true}, parsed);
    EXPECT_EQ(plain, ids_of(want["plain"]));
    EXPECT_EQ(ids, ids_of(want["ids"]));
    EXPECT_EQ(parsed, ids_of(want["parsed"]));
    const std::vector<int32_t> expected_ids = ids_of(want["ids"]);
    EXPECT_EQ(tok.decode(expected_ids, /*skip_special=*/true), want["decoded"].get<std::string>());
    EXPECT_EQ(tok.decode(expected_ids, /*skip_special=*/false), want["decoded_all"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(HfTokenizer, Golden,
                         ::testing::Values("llama3_style", "llama2_legacy", "llama2_metaspace", "gpt2_style",
                                           "qwen2_style", "misc_style"));

// Llama 2's tokenizer.json (the layout meta-llama ships: Prepend + Replace) and its
// tokenizer.model are one tokenizer: our two paths agree on every input that is valid UTF-8
// (sentencepiece has no rule for the rest). transformers' non-legacy conversion (Metaspace,
// prepend_scheme "first") is another tokenizer by design — it splits runs of leading spaces
// differently from sentencepiece — and is held to `tokenizers` alone, above.
TEST(HfTokenizer, Llama2JsonEqualsOurSentencePiecePath) {
  for (const char* name : {"llama2_legacy"}) {
    const data::Tokenizer json_tok(golden(std::string(name) + "/tokenizer.json"));
    const data::Tokenizer spm_tok(golden(std::string(name) + "/tokenizer.model"));
    ASSERT_EQ(spm_tok.kind(), data::Tokenizer::Kind::SentencePiece);
    EXPECT_EQ(json_tok.vocab_size(), spm_tok.vocab_size());
    EXPECT_EQ(json_tok.bos_id(), spm_tok.bos_id());
    EXPECT_EQ(json_tok.eos_id(), spm_tok.eos_id());
    for (const json& c : cases()["cases"]) {
      const std::string text = from_hex(c["hex"].get<std::string>());
      if (c["name"].get<std::string>().starts_with("invalid")) continue;
      SCOPED_TRACE(std::string(name) + " / " + c["name"].get<std::string>());
      EXPECT_EQ(json_tok.encode(text), spm_tok.encode(text));
      const std::vector<int32_t> ids = spm_tok.encode(text);
      EXPECT_EQ(json_tok.decode(ids), spm_tok.decode(ids));
    }
  }
}

// A model folder's chat template rendered (fsdp/chat/) and its text tokenized with special
// tokens parsed and none added: transformers' apply_chat_template(tokenize=True), which
// `fsdp_train tokenize --chat` prints (Llama 3's and Qwen2's published templates over the
// golden tokenizers; the user text holding "<|eot_id|>" is parsed there too, as transformers does).
TEST(HfTokenizer, ChatTemplateIdsAsApplyChatTemplate) {
  int checked = 0;
  for (const json& c : cases()["chat"]) {
    const std::string folder = golden(c["folder"].get<std::string>());
    SCOPED_TRACE(folder + " / " + c["messages"].dump());
    const data::Tokenizer tok(folder);
    const chat::ChatTemplate t = chat::ChatTemplate::from_model_dir(folder);
    const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(c["messages"].dump());
    const std::string text = t.render(messages, c["add_generation_prompt"].get<bool>()).text;
    EXPECT_EQ(text, c["text"].get<std::string>());
    std::vector<int32_t> ids;
    tok.encode(text, {.add_special = false, .parse_special = true}, ids);
    EXPECT_EQ(ids, ids_of(c["ids"]));
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(HfTokenizer, BosAndEosFromTokenizerConfig) {
  const data::Tokenizer llama3(golden("llama3_style"));
  EXPECT_EQ(llama3.bos_id(), 3000);  // <|begin_of_text|>
  EXPECT_EQ(llama3.eos_id(), 3001);  // <|end_of_text|>
  const data::Tokenizer qwen(golden("qwen2_style"));
  EXPECT_EQ(qwen.bos_id(), -1);  // bos_token: null
  EXPECT_EQ(qwen.eos_id(), 2502);  // <|im_end|>
}

TEST(HfTokenizer, FolderPrefersTokenizerJson) {
  EXPECT_EQ(data::resolve_tokenizer_file(golden("llama2_legacy")), golden("llama2_legacy") + "/tokenizer.json");
  const fs::path dir = scratch("tok_empty_folder");
  fs::create_directories(dir);
  test::expect_error([&] { data::Tokenizer t(dir.string()); }, {dir.string(), "neither tokenizer.json nor tokenizer.model"});
}

TEST(HfTokenizer, TheHashCoversTheFileAndItsConfig) {
  const data::Tokenizer a(golden("llama3_style"));
  const fs::path copy = scratch("tok_hash");
  fs::remove_all(copy);
  fs::create_directories(copy);
  fs::copy_file(golden("llama3_style/tokenizer.json"), copy / "tokenizer.json");
  const data::Tokenizer without_config(copy.string());
  EXPECT_NE(a.content_hash(), without_config.content_hash());
  EXPECT_EQ(without_config.bos_id(), 3000);  // the template's leading special token
  EXPECT_EQ(without_config.eos_id(), -1);
}

// A file that uses a piece this tokenizer does not implement is refused by its JSON path,
// never run differently.
class BadFile : public ::testing::Test {
 protected:
  fs::path dir = scratch("tok_bad");
  void TearDown() override { fs::remove_all(dir); }
  json base() {
    std::ifstream f(golden("llama3_style/tokenizer.json"));
    return json::parse(f);
  }
  void expect_refused(const json& j, std::initializer_list<std::string> parts) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << j.dump();
    test::expect_error([&] { data::Tokenizer t((dir / "tokenizer.json").string()); }, parts);
  }
  void expect_refused_text(const std::string& text, std::initializer_list<std::string> parts) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << text;
    test::expect_error([&] { data::Tokenizer t((dir / "tokenizer.json").string()); }, parts);
  }
};

TEST_F(BadFile, UnsupportedPiecesNameTheirPath) {
  json j = base();
  j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "UnicodeScripts"}};
  expect_refused(j, {"tokenizer.json: pre_tokenizer.pretokenizers[1].type: \"UnicodeScripts\" is not supported"});
  j = base();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(j, {"normalizer.type: \"Lowercase\" is not supported"});
  j = base();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, {"model.type: \"WordPiece\" is not supported"});
  j = base();
  j["decoder"] = {{"type", "CTC"}};
  expect_refused(j, {"decoder.type: \"CTC\" is not supported"});
  j = base();
  j["post_processor"]["processors"][1]["single"][0] = {{"SpecialToken", {{"id", "<nope>"}, {"type_id", 0}}}};
  expect_refused(j, {"post_processor.processors[1].single[0].SpecialToken.id", "\"<nope>\" is not in special_tokens"});
  j = base();
  j["model"]["dropout"] = 0.1;
  expect_refused(j, {"model.dropout", "training only"});
  j = base();
  j["truncation"] = {{"max_length", 8}};
  expect_refused(j, {"truncation", "not supported"});
}

TEST_F(BadFile, BrokenModelsNameWhatIsWrong) {
  json j = base();
  j["model"]["merges"][3] = {"no-such-token", "x"};
  expect_refused(j, {"model.merges[3]", "\"no-such-token\" is not in model.vocab"});
  j = base();
  j["model"]["merges"][0] = "three part merge";
  expect_refused(j, {"model.merges[0]", "expected \"left right\""});
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_refused(j, {"pre_tokenizer.pretokenizers[0].pattern", "not a pattern this tokenizer can run"});
  j = base();
  j["added_tokens"][0]["id"] = 5;  // "<|begin_of_text|>" is not model token 5
  j["model"]["vocab"]["<|begin_of_text|>"] = 7;
  expect_refused(j, {"added_tokens[0].id", "has id 7 in model.vocab"});
  j = base();
  j.erase("model");
  expect_refused(j, {"tokenizer.json: model: missing"});
  expect_refused_text("{\"model\": ", {"tokenizer.json: not JSON"});
  expect_refused_text("[1, 2]", {"expected a JSON object"});
}

// What fuzz_tokenizer_json found (its inputs are in tests/fuzz/corpus/tokenizer_json/crash_*):
// a number past a double's range escaped as the library's exception, a post-processor id in a
// hole of the vocabulary encoded and then failed to decode, and one id near 2^31 made the
// by-id table ask for 68 GB.
TEST_F(BadFile, WhatTheFuzzerFoundIsRefusedByNameOrLoadsSmall) {
  expect_refused_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e999}}}",
                      {"tokenizer.json: holds a number too large for a double"});
  json j = base();
  json extra = j["added_tokens"][0];
  extra["id"] = 3020;  // the ids 3011..3019 become a hole
  extra["content"] = "<|past_a_hole|>";
  j["added_tokens"].push_back(extra);
  json& template_processing = j["post_processor"]["processors"][1];
  ASSERT_TRUE(template_processing["special_tokens"].contains("<|begin_of_text|>")) << template_processing.dump();
  template_processing["special_tokens"]["<|begin_of_text|>"]["ids"][0] = 3015;
  expect_refused(j, {"post_processor: special token id 3015 is no token's id"});

  j = base();
  extra["id"] = (int64_t(1) << 31) - 2;
  j["added_tokens"].push_back(extra);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  const data::Tokenizer t((dir / "tokenizer.json").string());
  EXPECT_EQ(t.vocab_size(), (int64_t(1) << 31) - 1);
  std::vector<int32_t> ids;
  t.encode("<|past_a_hole|>", {.add_special = false, .parse_special = true}, ids);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(t.decode(ids, false), "<|past_a_hole|>");
}

// Special tokens written in text stay text unless asked for: corpus text that contains
// "<|eot_id|>" must not end a training document's turn.
TEST(HfTokenizer, SpecialTokensInTextAreTextByDefault) {
  const data::Tokenizer tok(golden("llama3_style"));
  const std::vector<int32_t> plain = tok.encode("<|eot_id|>");
  EXPECT_GT(plain.size(), 1u);
  std::vector<int32_t> parsed;
  tok.encode("<|eot_id|>", {.add_special = false, .parse_special = true}, parsed);
  EXPECT_EQ(parsed, std::vector<int32_t>({3009}));
  EXPECT_EQ(tok.decode(plain), "<|eot_id|>");  // as text it decodes back to itself
}

TEST(HfTokenizer, DecodeRefusesIdsOutsideTheVocabulary) {
  const data::Tokenizer tok(golden("gpt2_style"));
  const std::vector<int32_t> bad = {5, int32_t(tok.vocab_size())};
  test::expect_error([&] { tok.decode(bad); }, {"token id", "not in the vocabulary"});
}

TEST(HfTokenizer, EncodesFromSeveralThreadsAtOnce) {
  const data::Tokenizer tok(golden("llama3_style"));
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (const json& c : cases()["cases"]) {
    texts.push_back(from_hex(c["hex"].get<std::string>()));
    want.push_back(ids_of(c["llama3_style"]["plain"]));
  }
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = (size_t(t) + size_t(round)) % texts.size(), k = 0; k < texts.size(); ++k, i = (i + 1) % texts.size())
          if (tok.encode(texts[i]) != want[i]) ++wrong;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace fsdp

namespace fsdp {
namespace {

// `fsdp_train tokenize` through the binary: ids as tokenizers' encode(text), --decode back,
// --chat as apply_chat_template, and its refusals with their exit codes.
class TokenizeCli : public ::testing::Test {
 protected:
  fs::path dir = scratch("tokenize_cli");
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  // stdout and stderr apart: the ids are stdout's alone.
  test::CommandResult run(const std::string& input, const std::string& args) {
    std::ofstream(dir / "in.txt") << input;
    const int status = std::system((std::string(FSDP_TRAIN_BIN) + " tokenize " + args + " < " + (dir / "in.txt").string() +
                                    " > " + (dir / "out.txt").string() + " 2> " + (dir / "err.txt").string())
                                       .c_str());
    test::CommandResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(dir / "out.txt");
    r.out.assign(std::istreambuf_iterator<char>(f), {});
    return r;
  }
  std::string err() {
    std::ifstream f(dir / "err.txt");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

TEST_F(TokenizeCli, EncodesDecodesAndRendersAsTheReferenceLibraries) {
  const json* hello = nullptr;
  const json* special = nullptr;
  for (const json& c : cases()["cases"]) {
    if (c["name"] == "hello") hello = &c;
    if (c["name"] == "special_text") special = &c;
  }
  ASSERT_TRUE(hello && special);
  const std::string tok = golden("llama3_style");
  const std::string line1 = from_hex((*hello)["hex"].get<std::string>());
  const std::string line2 = from_hex((*special)["hex"].get<std::string>());
  auto r = run(line1 + "\n" + line2 + "\n", "--tokenizer " + tok);
  ASSERT_EQ(r.code, 0) << err();
  EXPECT_EQ(r.out, join(ids_of((*hello)["llama3_style"]["ids"])) + "\n" + join(ids_of((*special)["llama3_style"]["ids"])) + "\n");
  r = run(line2 + "\n", "--tokenizer " + tok + " --no-special --split-special");
  EXPECT_EQ(r.out, join(ids_of((*special)["llama3_style"]["plain"])) + "\n");
  r = run(join(ids_of((*special)["llama3_style"]["ids"])) + "\n", "--tokenizer " + tok + " --decode");
  EXPECT_EQ(r.out, json((*special)["llama3_style"]["decoded"]).dump() + "\n");
  // --json: inputs that hold newlines.
  r = run("\"a\\nb\"\n", "--tokenizer " + golden("gpt2_style") + " --json");
  ASSERT_EQ(r.code, 0) << err();
  // --chat, and --render for the text.
  for (const json& c : cases()["chat"]) {
    const std::string flags = "--tokenizer " + golden(c["folder"].get<std::string>()) + " --chat" +
                              (c["add_generation_prompt"].get<bool>() ? " --add-generation-prompt" : "");
    r = run(c["messages"].dump() + "\n", flags);
    ASSERT_EQ(r.code, 0) << err();
    EXPECT_EQ(r.out, join(ids_of(c["ids"])) + "\n");
    r = run(c["messages"].dump() + "\n", flags + " --render");
    EXPECT_EQ(r.out, json(c["text"]).dump() + "\n");
  }
}

TEST_F(TokenizeCli, BadInputIsNamedWithItsLine) {
  const std::string tok = golden("llama3_style");
  auto r = run("3000 1\n1 x\n", "--tokenizer " + tok + " --decode");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(err().find("stdin line 2: expected space-separated token ids"), std::string::npos) << err();
  r = run("5 999999\n", "--tokenizer " + tok + " --decode");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(err().find("stdin line 1: token id 999999 is not in the vocabulary"), std::string::npos) << err();
  r = run("[{\"role\": \"user\"}]\n{}\n", "--tokenizer " + golden("llama3_chat") + " --chat");
  EXPECT_EQ(r.code, 1);
  r = run("{}\n", "--tokenizer " + golden("llama3_chat") + " --chat");
  EXPECT_NE(err().find("stdin line 1: expected a JSON list of messages"), std::string::npos) << err();
  r = run("x\n", "--tokenizer " + tok + " --chat");  // a folder without a chat template
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(err().find("llama3_style"), std::string::npos) << err();
  r = run("", "--decode --tokenizer " + tok + " --json");
  EXPECT_EQ(r.code, 2);
  r = run("", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(err().find("--tokenizer PATH is required"), std::string::npos) << err();
}

}  // namespace
}  // namespace fsdp
