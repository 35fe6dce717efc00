// Inputs the fuzz targets (tests/fuzz) found crashing a reader, each kept in the target's
// corpus as crash_<what>, held here to the one clear error they now get. The corpora are
// also replayed whole by the fuzz_*_replay tests; these say what each input must produce.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/config/config.h"
#include "fsdp/data/text_inputs.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

std::string corpus_input(const std::string& target, const std::string& name) {
  std::ifstream in(test::source_path("tests/fuzz/corpus/" + target + "/" + name), std::ios::binary);
  EXPECT_TRUE(in.good()) << target << "/" << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    config::load_config_string(text, "fuzz.yaml", overrides);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

// yaml-cpp 0.7's LoadAll (which the loader used to find a second document) never returned
// for a stray ',' at the top level; its Load returns at once, but with no document and no
// error, which would have made the whole file the defaults.
TEST(FuzzRegressions, AStrayTopLevelCommaIsRefusedInsteadOfHanging) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(config_error(corpus_input("config_yaml", "crash_loadall_stray_comma.yaml")),
            "fuzz.yaml:2: invalid YAML: no document could be read from here on (a ',' outside [ ] or { }?)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(config_error("# only comments\n\n"), "") << "an empty config is all defaults";
}

// yaml-cpp 0.7 took lone carriage returns (line breaks in YAML) into a plain scalar, and the
// dumped config loaded back different: every line break is read as LF now.
TEST(FuzzRegressions, LoneCarriageReturnsAreLineBreaks) {
  const config::Config c =
      config::load_config_string(corpus_input("config_yaml", "crash_lone_carriage_returns.yaml"), "fuzz.yaml");
  EXPECT_EQ(c.data.path, "data/llama2");
  EXPECT_EQ(c.data.num_workers, 2);
  EXPECT_EQ(config::load_config_string(config::dump_yaml(c), "dumped.yaml"), c);
  EXPECT_EQ(config::load_config_string("data:\r\n  path: a\r\n  num_workers: 3\r\n", "crlf.yaml").data.num_workers, 3);
  EXPECT_EQ(config_error("", {"data.path=a\rb"}), "--set: a line break (byte 0x0d) at column 12: a --set value is one line");
}

// yaml-cpp took invalid UTF-8 into a scalar and dump_yaml wrote it back as U+FFFD, so the
// effective config logged and stored in checkpoints was not the one loaded.
TEST(FuzzRegressions, ConfigThatIsNotPrintableUtf8IsRefusedWithItsLine) {
  EXPECT_EQ(config_error(corpus_input("config_yaml", "crash_invalid_utf8.yaml")),
            "fuzz.yaml:3: byte 0xff at column 14 is not printable UTF-8 text, all a YAML file may hold");
  EXPECT_EQ(config_error("run:\n  dir: a\x01z\n"),
            "fuzz.yaml:2: byte 0x01 at column 9 is not printable UTF-8 text, all a YAML file may hold");
  EXPECT_NE(config_error("run:\n  dir: \xc0\xaf\n"), "") << "an overlong '/'";
  EXPECT_NE(config_error("run:\n  dir: \xed\xa0\x80\n"), "") << "a UTF-16 surrogate";
  EXPECT_NE(config_error("run:\n  dir: \xf4\x90\x80\x80\n"), "") << "past U+10FFFF";
  EXPECT_NE(config_error("run:\n  dir: x\xe2\x82\n"), "") << "a sequence cut short";
  EXPECT_EQ(config_error("", {"run.dir=a\xffz"}), "--set: byte 0xff at column 10 is not printable UTF-8 text");
  // Real UTF-8 loads, and its dump loads back to the same config.
  const config::Config c = config::load_config_string("run:\n  dir: runs/caf\xc3\xa9-\xe4\xb8\xad-\xf0\x9f\x9a\x80\n", "x");
  EXPECT_EQ(c.run.dir, "runs/caf\xc3\xa9-\xe4\xb8\xad-\xf0\x9f\x9a\x80");
  EXPECT_EQ(config::load_config_string(config::dump_yaml(c), "dumped"), c);
}

class HfConfigRegressions : public ::testing::Test {
 protected:
  // The corpus input as <tmp>/config.json; the error read_hf_llama_config gives for it.
  std::string error_for(const std::string& name) {
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json", std::ios::binary) << corpus_input("hf_config_json", name);
    try {
      ckpt::read_hf_llama_config(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_ = fs::temp_directory_path() / ("fsdp_fuzz_regressions_" + std::to_string(::getpid()));
};

// nlohmann's type_error escaped read_hf_llama_config (not an fsdp::Error: no file named,
// and the fuzzer's process aborted) for a document that is not an object, or a key of
// another JSON type.
TEST_F(HfConfigRegressions, AValueOfTheWrongJsonTypeNamesTheFile) {
  const std::string file = (dir_ / "config.json").string();
  EXPECT_EQ(error_for("crash_not_an_object.json"), file + ": expected a JSON object of model settings, got a list");
  EXPECT_EQ(error_for("crash_model_type_number.json"), file + ": 'model_type' must be a string, got number");
}

// vocab_size 2^40 and hidden_size 6 x 2^40 passed validation and overflowed int64 in the
// parameter count (UBSan: signed integer overflow), the first of many sizes built from them.
TEST_F(HfConfigRegressions, AShapeWhoseParameterCountOverflowsIsRefused) {
  // Refused at the first size past its bound (model::ShapeLimits), before any product.
  EXPECT_EQ(error_for("crash_parameter_count_overflow.json"),
            (dir_ / "config.json").string() + ": 'vocab_size' must be in [1, 16777216], got 1099511627776");
}

// An integer field written as 96.5, or too long for 64 bits (nlohmann parses it as a float),
// was cast to int64: truncated, or undefined (UBSan: 1.1e22 is outside the range of long).
TEST_F(HfConfigRegressions, IntegerFieldsMustBeIntegersThatFit) {
  const std::string e = error_for("crash_integer_too_long.json");
  EXPECT_NE(e.find("config.json: 'vocab_size' must be an integer, got the number 1.0992147483648512e+22"),
            std::string::npos)
      << e;
}

// num_attention_heads 0 with a head_dim: hidden_size / 0 before validate() refused the zero
// (UBSan: division by zero; SIGFPE without it).
TEST_F(HfConfigRegressions, ZeroHeadsAreRefusedBeforeAnythingDividesByThem) {
  const std::string e = error_for("crash_zero_heads_with_head_dim.json");
  EXPECT_NE(e.find("config.json: 'num_attention_heads' must be in [1, 4096], got 0"), std::string::npos) << e;
}

// A JSONL line holding a number past double's range ({"id": 1e3083}) threw nlohmann's
// out_of_range out of parse_jsonl_line (only parse_error was caught), which prepare turned
// into a fatal error in nlohmann's words instead of a malformed line it counts and skips.
TEST(FuzzRegressions, AJsonlNumberOutOfRangeIsAMalformedLine) {
  const std::string input = corpus_input("prepare_jsonl", "crash_number_overflow.jsonl").substr(1);  // the kind byte
  const std::string line = input.substr(input.find('\n') + 1, input.find("}\n", input.find('\n')) - input.find('\n'));
  ASSERT_EQ(line, "{\"id\": 1e3083}");
  const data::ParsedLine p = data::parse_jsonl_line(line, "text", 32000);
  EXPECT_EQ(p.kind, data::ParsedLine::Kind::kMalformed);
  EXPECT_NE(p.error.find("malformed JSON: number overflow parsing '1e3083'"), std::string::npos) << p.error;
}

// A manifest piece of extent 2^63 - 1 followed by another overflowed the tiling check's
// running offset (UBSan: signed integer overflow in CheckpointReader::check_structure).
TEST(FuzzRegressions, ManifestPiecesThatOverrunTheUnitAreRefused) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_fuzz_manifest_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.json", std::ios::binary) << corpus_input("checkpoint_manifest", "crash_extent_overflow.json");
  test::expect_error([&] { ckpt::CheckpointReader reader(dir.string()); },
                     {(dir / "manifest.json").string(), "unit embedding pieces do not tile its 32 elements", "overrun at 0"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
