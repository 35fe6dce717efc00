// The chat-template interpreter (src/chat) against transformers, byte for byte:
//   - every published template in tests/golden/chat_templates/<name>/ over its conversations,
//     as transformers 5.24's apply_chat_template(..., tokenize=False) rendered them (or the
//     error the template raised), loaded from the folder as AutoTokenizer loads it;
//   - jinja_cases.json: one construct per case, rendered by transformers' own Jinja environment;
//   - hand-written checks of what only we say: the line:column of every refused construct and
//     syntax error, the loader's errors naming file and key, and the limits.
// tests/golden/generate_chat_templates.py writes the fixtures (tests/golden/README.md).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdp/chat/chat_template.h"
#include "fsdp/chat/template_eval.h"
#include "fsdp/chat/template_parser.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using namespace fsdp::chat;

namespace {

const fs::path kFixtures = fs::path(FSDP_SOURCE_DIR) / "tests/golden/chat_templates";

json load(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}

// The generator froze strftime_now's clock at this local time (index.json: frozen_now).
RenderOptions frozen_clock() {
  RenderOptions o;
  o.now = [] {
    std::tm tm{};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 8;
    tm.tm_mday = 3;
    tm.tm_hour = 14;
    tm.tm_min = 5;
    tm.tm_sec = 9;
    tm.tm_isdst = -1;
    return std::chrono::system_clock::from_time_t(std::mktime(&tm));
  };
  return o;
}

std::string render(const std::string& source, const json& vars = json::object()) {
  const ParsedTemplate t = parse_template(source);
  std::vector<std::pair<std::string, Value>> v;
  for (const auto& [k, e] : vars.items()) v.emplace_back(k, from_json(e));
  return render_template(t, v, frozen_clock()).text;
}

// The message of the error `source` gives when parsed and rendered ("" when none).
std::string error_of(const std::string& source, const json& vars = json::object()) {
  try {
    render(source, vars);
  } catch (const fsdp::Error& e) {
    return e.what();
  }
  return "";
}

std::vector<fs::path> fixture_folders() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kFixtures))
    if (e.is_directory() && fs::exists(e.path() / "cases.json")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(ChatTemplateGolden, PublishedTemplatesRenderAsTransformers) {
  const json index = load(kFixtures / "index.json");
  ASSERT_GE(index["templates"].size(), 6u);
  EXPECT_EQ(index["frozen_now"], "2024-09-03T14:05:09");
  int cases = 0, raised = 0;
  for (const auto& dir : fixture_folders()) {
    for (const auto& c : load(dir / "cases.json")) {
      SCOPED_TRACE(dir.filename().string() + " / " + c["id"].get<std::string>());
      const std::string name = c.value("template_name", "");
      const ChatTemplate t = ChatTemplate::from_model_dir(dir.string(), name);
      const json vars = c.contains("variables") ? c["variables"] : json(nullptr);
      ++cases;
      if (c.contains("expected")) {
        EXPECT_EQ(t.render(c["messages"], c["add_generation_prompt"], vars, frozen_clock()).text,
                  c["expected"].get<std::string>());
      } else {
        ++raised;
        try {
          t.render(c["messages"], c["add_generation_prompt"], vars, frozen_clock());
          ADD_FAILURE() << "expected the template to raise: " << c["error"];
        } catch (const TemplateError& e) {
          EXPECT_TRUE(e.raised_by_template()) << e.what();
          EXPECT_EQ(e.message(), c["error"].get<std::string>());
        }
      }
    }
  }
  EXPECT_GE(cases, 150);
  EXPECT_GE(raised, 10);
}

TEST(ChatTemplateGolden, EveryPublishedTemplateIsInTheIndexWithItsSource) {
  const json index = load(kFixtures / "index.json");
  for (const auto& t : index["templates"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    std::ifstream src(kFixtures / "sources" / (name + ".jinja"), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
    // The folder's tokenizer_config.json holds the verbatim source.
    EXPECT_EQ(ChatTemplate::from_model_dir((kFixtures / name).string()).source(), text);
    EXPECT_FALSE(t["origin"].get<std::string>().empty());
    EXPECT_FALSE(t["copied_from"].get<std::string>().empty());
  }
}

TEST(ChatTemplateGolden, JinjaConstructsMatchTransformersEnvironment) {
  int n = 0;
  for (const auto& c : load(kFixtures / "jinja_cases.json")) {
    const std::string src = c["template"];
    SCOPED_TRACE(src);
    ++n;
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(render(src, c["vars"]), c["expected"].get<std::string>());
      } catch (const fsdp::Error& e) {
        ADD_FAILURE() << e.what();
      }
    } else {
      EXPECT_NE(error_of(src, c["vars"]), "") << "Jinja raised " << c["error"] << ": " << c["message"];
    }
  }
  EXPECT_GE(n, 100);
}

// ---- what only we say: the place of every refusal ----

TEST(ChatTemplateErrors, UnsupportedConstructsNameLineAndColumn) {
  EXPECT_EQ(error_of("line one\n{{ 'text' | wordwrap(2) }}"), "chat_template:2:13: filter 'wordwrap' is not supported");
  EXPECT_EQ(error_of("{% if x is frobnicated %}{% endif %}"), "chat_template:1:12: test 'frobnicated' is not supported");
  EXPECT_EQ(error_of("a\n  b {% include 'x.jinja' %}"), "chat_template:2:8: tag 'include' is not supported");
  EXPECT_EQ(error_of("{% extends 'base' %}"), "chat_template:1:4: tag 'extends' is not supported");
  EXPECT_EQ(error_of("{{ 'x {}'.format(1) }}"), "chat_template:1:11: method 'format' is not supported");
  EXPECT_EQ(error_of("{% for m in messages recursive %}{% endfor %}"),
            "chat_template:1:22: recursive loops are not supported");
  EXPECT_EQ(error_of("{{ f(*args) }}"), "chat_template:1:6: *args and **kwargs in calls are not supported");
  // Refused at parse time: a branch that never runs still fails.
  EXPECT_EQ(error_of("{% if false %}{{ x | unique }}{% endif %}"), "chat_template:1:22: filter 'unique' is not supported");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("{% if true %}never closed"),
            "chat_template:1:26: unexpected end of template: the block opened at 1:4 needs 'elif' or 'else' or 'endif'");
  EXPECT_EQ(error_of("ok\n{% endfor %}"), "chat_template:2:4: unexpected 'endfor': no block is open that it could close");
  EXPECT_EQ(error_of("{{ 1 + }}"), "chat_template:1:8: unexpected end of print statement");
  EXPECT_EQ(error_of("{{ 'open }}"), "chat_template:1:4: unexpected char \"'\": the string is never closed");
  EXPECT_EQ(error_of("{# open"), "chat_template:1:1: missing end of comment tag");
  EXPECT_EQ(error_of("{{ f(1 }}"), "chat_template:1:8: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{{ a ! b }}"), "chat_template:1:6: unexpected character '!'");
  EXPECT_EQ(error_of("{% break %}"), "chat_template:1:4: 'break' outside of a loop");
  EXPECT_EQ(error_of("{{ x"), "chat_template:1:1: unexpected end of template: this '{{' is never closed");
  EXPECT_EQ(error_of("é{{ é }}"), "chat_template:1:5: unexpected character 'é'");
  EXPECT_EQ(error_of(std::string("ok\n\xff")), "chat_template:2:1: the template is not valid UTF-8 (byte 3)");
}

TEST(ChatTemplateErrors, RenderErrorsNameWhereTheyHappen) {
  EXPECT_EQ(error_of("{{ 1 }}\n{{ messages[0].content.x.y }}", {{"messages", json::array({{{"content", "hi"}}})}}),
            "chat_template:2:26: 'str object' has no attribute 'x'");
  EXPECT_EQ(error_of("{{ 1 + 'a' }}"), "chat_template:1:6: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(error_of("{{ undefined_thing.attr }}"), "chat_template:1:20: 'undefined_thing' is undefined");
  EXPECT_EQ(error_of("{{ raise_exception('Roles must alternate') }}"),
            "chat_template:1:4: the template raised an error: Roles must alternate");
  EXPECT_EQ(error_of("{% set x = 3 %}{% set x.y = 1 %}"),
            "chat_template:1:19: can only assign attributes on namespace objects ('x' is a int)");
  EXPECT_EQ(error_of("{{ range(1000000) | length }}"),
            "chat_template:1:4: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(error_of("{{ 2 ** 64 }}"), "chat_template:1:6: integer overflow (more than 64 bits)");
  try {
    render("{{ raise_exception('bad') }}");
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_EQ(e.message(), "bad");
    EXPECT_EQ(e.pos().line, 1);
    EXPECT_EQ(e.pos().col, 4);
  }
}

TEST(ChatTemplateLimits, LoopsMacrosAndOutputAreBounded) {
  RenderOptions o;
  o.max_steps = 1000;
  const ParsedTemplate loops = parse_template("{% for a in range(100) %}{% for b in range(100) %}{% endfor %}{% endfor %}");
  EXPECT_THROW(render_template(loops, {}, o), TemplateError);
  const ParsedTemplate recursion = parse_template("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_THROW(render_template(recursion, {}, {}), TemplateError);
  o.max_output = 100;
  const ParsedTemplate big = parse_template("{{ 'x' * 1000 }}");
  EXPECT_THROW(render_template(big, {}, o), TemplateError);
}

// Nesting is bounded where the stack would otherwise run out (fuzz_chat_template: 2000 unary
// '+' in a row overflowed it; the input is tests/fuzz/corpus/chat_template/crash_*), and a
// slice among several subscripts, which once left a null node, is refused.
TEST(ChatTemplateLimits, NestingIsBoundedAndNamedWithItsPosition) {
  EXPECT_EQ(error_of("{{ " + std::string(300, '+') + "1 }}"),
            "chat_template:1:204: the expression nests deeper than 200 levels");
  EXPECT_EQ(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
            "chat_template:1:204: the expression nests deeper than 200 levels");
  std::string ifs;
  for (int i = 0; i < 201; ++i) ifs += "{% if true %}";
  EXPECT_EQ(error_of(ifs).substr(0, 47), "chat_template:1:2604: blocks nest deeper than 2");
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("nest deeper than 800 levels"), std::string::npos);
  std::string fine = "{{ 1";
  for (int i = 0; i < 100; ++i) fine += " + 1";
  EXPECT_EQ(render(fine + " }}"), "101");
  EXPECT_EQ(error_of("{{ [1, 2][1, :] }}"),
            "chat_template:1:14: a slice among several subscripts ([a, b:c]) is not supported");
}

// ---- the interpreter's pieces, by hand ----

TEST(ChatTemplateInterpreter, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n"), "    1\n    2\n");
  EXPECT_EQ(render("a\n    {% if true %}\nb\n    {% endif %}\nc"), "a\nb\nc");
  // lstrip_blocks never applies before {{, nor when the tag is not alone after the indentation.
  EXPECT_EQ(render("  {{ 'x' }}  y {% if true %}z{% endif %}"), "  x  y z");
  EXPECT_EQ(render("a   {%- if true -%}   b   {%- endif %}"), "ab");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif +%}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("x {#- note -#}\n y"), "xy");
  EXPECT_EQ(render("one\r\ntwo\rthree\n"), "one\ntwo\nthree");  // newlines normalised, the last one dropped
  EXPECT_EQ(render("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
}

TEST(ChatTemplateInterpreter, ScopesNamespacesAndLoops) {
  EXPECT_EQ(render("{% set n = 0 %}{% for i in [1, 2] %}{% set n = n + i %}{% endfor %}{{ n }}"), "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
            "0TrueFalse2 1FalseTrue2 ");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(render("{{ messages[1:] | length }} {{ messages[-1].role }}",
                   {{"messages", json::array({{{"role", "system"}}, {{"role", "user"}}})}}),
            "1 user");
}

TEST(ChatTemplateInterpreter, GenerationBlocksRecordTheirSpans) {
  const ParsedTemplate t = parse_template("<u>hi</u>{% generation %}<a>yes</a>{% endgeneration %}<end>");
  const RenderResult r = render_template(t, {});
  EXPECT_EQ(r.text, "<u>hi</u><a>yes</a><end>");
  ASSERT_EQ(r.generation_spans.size(), 1u);
  EXPECT_EQ(r.text.substr(r.generation_spans[0].first, r.generation_spans[0].second - r.generation_spans[0].first),
            "<a>yes</a>");
}

TEST(ChatTemplateInterpreter, TojsonIsPythonsJsonDumps) {
  const json tool = json::parse(R"({"name": "f", "parameters": {"x": [1, 2.0, null, true]}, "é": "\u2028"})");
  EXPECT_EQ(render("{{ t | tojson }}", {{"t", tool}}),
            "{\"name\": \"f\", \"parameters\": {\"x\": [1, 2.0, null, true]}, \"é\": \"\u2028\"}");
  EXPECT_EQ(render("{{ t | tojson(indent=2) }}", {{"t", json::parse(R"({"a": [1], "b": {}})")}}),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ 'é😀' | tojson(ensure_ascii=true) }}"), "\"\\u00e9\\ud83d\\ude00\"");
}

// ---- the loader: what transformers reads, and errors that name the file and key ----

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "fsdp_chat_XXXXXX").string();
    path = ::mkdtemp(templ.data());
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

std::string load_error(const TempDir& d, const std::string& name = "") {
  try {
    ChatTemplate::from_model_dir(d.path.string(), name);
  } catch (const fsdp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ChatTemplateLoader, ErrorsNameTheFileAndKey) {
  TempDir d;
  const std::string cfg = (d.path / "tokenizer_config.json").string();
  EXPECT_NE(load_error(d).find("has no chat template: no chat_template.jinja"), std::string::npos) << load_error(d);
  d.write("tokenizer_config.json", "{\"chat_template\": ");
  EXPECT_NE(load_error(d).find(cfg + " is not valid JSON"), std::string::npos) << load_error(d);
  d.write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_EQ(load_error(d), cfg + ": chat_template: expected a string or a list of {\"name\", \"template\"} objects, got number");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "default"}]})");
  EXPECT_EQ(load_error(d), cfg + ": chat_template[0]: expected an object with string \"name\" and \"template\", got {\"name\":\"default\"}");
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "a", "template": "x"}, {"name": "b", "template": "y"}]})");
  EXPECT_EQ(load_error(d), d.path.string() + " has several chat templates (\"a\", \"b\") and none named \"default\": name the one to use");
  EXPECT_EQ(load_error(d, "c"), d.path.string() + " has no chat template named \"c\" (it has \"a\", \"b\")");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.path.string(), "b").source(), "y");
  d.write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}", "bos_token": {"content": "<s>"}})");
  EXPECT_EQ(load_error(d), cfg + ": bos_token: a special token is a string or an AddedToken object with a string \"content\", got {\"content\":\"<s>\"}");
  d.write("tokenizer_config.json", R"({"chat_template": "line\n{{ x | wordwrap }}"})");
  EXPECT_EQ(load_error(d), cfg + ": chat_template:2:8: filter 'wordwrap' is not supported");
}

TEST(ChatTemplateLoader, MessagesAreChecked) {
  const ChatTemplate t = ChatTemplate::from_string("{% for m in messages %}{{ m.role }}{% endfor %}");
  auto err = [&](const json& messages) {
    try {
      t.render(messages, false);
    } catch (const fsdp::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(err(json::object()), "messages: expected a JSON array of messages, got object");
  EXPECT_EQ(err(json::array()), "messages: cannot apply a chat template to an empty conversation");
  EXPECT_EQ(err(json::parse(R"([{"role": "user"}, {"content": "x"}])")), "messages[1]: the message has no \"role\"");
  EXPECT_EQ(err(json::parse(R"([{"role": 1}])")), "messages[0].role: expected a string, got number");
  EXPECT_EQ(err(json::parse(R"(["hi"])")), "messages[0]: a message is a JSON object, got string");
  EXPECT_EQ(t.render(json::parse(R"([{"role": "user"}, {"role": "assistant"}])"), false).text, "userassistant");
}

TEST(ChatTemplateLoader, JinjaFilesWinAndLegacySpecialTokensMapIsRead) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"chat_template": "from config", "eos_token": "</s>"})");
  d.write("special_tokens_map.json", R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "<|end|>"})");
  const json msgs = json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.path.string()).render(msgs, false).text, "from config");
  d.write("chat_template.jinja", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.path.string()).render(msgs, false).text, "<s>hi<|end|>");
  d.write("chat_templates/tool_use.jinja", "tools: {{ tools | length if tools is not none else 'none' }}");
  const ChatTemplate t = ChatTemplate::from_model_dir(d.path.string());
  EXPECT_EQ(t.render(msgs, false, json::parse(R"({"tools": [{"name": "f"}]})")).text, "tools: 1");
  EXPECT_EQ(t.render(msgs, false).text, "<s>hi<|end|>");
  EXPECT_EQ(ChatTemplate::from_model_dir(d.path.string(), "tool_use").render(msgs, false).text, "tools: none");
}
