// Inputs the fuzz targets (tests/fuzz) found crashing a reader, each kept in the target's
// corpus as crash_<what>, held here to the one clear error they now get. The corpora are
// also replayed whole by the fuzz_*_replay tests; these say what each input must produce.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fsdp/config/config.h"
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

}  // namespace
}  // namespace fsdp
