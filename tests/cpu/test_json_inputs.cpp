// JSON files that users hand us, refused by the file and the key in words, never with
// nlohmann's text ("[json.exception.type_error.302] type must be number, but is string"):
// adapter_config.json (not JSON; lora_alpha "8"; r "4", 0 or -3, once reported as a lora.rank
// the user never set), an adapter folder without adapter_model.safetensors (once "a model
// folder with no model.safetensors"), a shard manifest.json that is not JSON, a checkpoint
// manifest without "model", config.json's rope_theta 1e400 and quantization_config's
// load_in_8bit "yes", a rank trace cut short in trace-merge. In process, on files the tests
// write.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_frozen.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/manifest.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "fsdp/core/json_file.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/obs/trace_merge.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_json_inputs_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The error's message, which must name every part and hold no library text.
void expect_words(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  const std::string what = test::error_message(f);
  for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << p << "\nin: " << what;
  EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
  EXPECT_EQ(what.find("type must be"), std::string::npos) << what;
}

// The golden adapter's config with `change` applied, in a fresh folder (weights copied along).
std::string adapter_with(const std::string& name, const std::function<void(nlohmann::json&)>& change) {
  const std::string dir = scratch(name);
  const std::string golden = test::source_path("tests/golden/lora_tiny/r4_alpha8");
  fs::copy_file(golden + "/adapter_model.safetensors", dir + "/adapter_model.safetensors");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(golden + "/adapter_config.json"));
  change(j);
  std::ofstream(dir + "/adapter_config.json") << j.dump();
  return dir;
}

TEST(JsonInputs, AdapterConfigKeysAreNamedByTheirFileAndKey) {
  const std::string file = "adapter_config.json";
  const std::string text_alpha = adapter_with("alpha", [](auto& j) { j["lora_alpha"] = "8"; });
  expect_words([&] { ckpt::read_peft_adapter_config(text_alpha); },
               {text_alpha + "/" + file + ": 'lora_alpha' must be a number, got the string \"8\""});
  const std::string text_r = adapter_with("r_text", [](auto& j) { j["r"] = "4"; });
  expect_words([&] { ckpt::read_peft_adapter_config(text_r); },
               {text_r + "/" + file + ": 'r' must be an integer, got the string \"4\""});
  for (const int r : {0, -3}) {
    const std::string dir = adapter_with("r" + std::to_string(r), [r](auto& j) { j["r"] = r; });
    expect_words([&] { ckpt::read_peft_adapter_config(dir); },
                 {dir + "/" + file + ": 'r' (the adapters' rank) must be at least 1, got " + std::to_string(r)});
  }
  const std::string no_targets = adapter_with("targets", [](auto& j) { j["target_modules"] = 7; });
  expect_words([&] { ckpt::read_peft_adapter_config(no_targets); },
               {"'target_modules' must be a string or a list of strings, got the number 7"});
  const std::string broken = scratch("broken_adapter");
  std::ofstream(broken + "/" + file) << "{\"r\": 4, \"lora_alpha\": ";
  expect_words([&] { ckpt::read_peft_adapter_config(broken); },
               {broken + "/" + file + ": not valid JSON (line 1, column"});
}

TEST(JsonInputs, AnAdapterFolderWithoutItsWeightsSaysSo) {
  const std::string dir = adapter_with("no_weights", [](auto&) {});
  fs::remove(dir + "/adapter_model.safetensors");
  expect_words([&] { ckpt::open_peft_adapter_weights(dir); },
               {"adapter folder " + dir + " has no adapter_model.safetensors", "PEFT adapter folder"});
  std::ofstream(dir + "/adapter_model.bin") << "pickle";
  expect_words([&] { ckpt::open_peft_adapter_weights(dir); },
               {"but an adapter_model.bin", "safe_serialization=True"});
}

TEST(JsonInputs, ManifestsAndConfigJsonNameTheFileAndTheKey) {
  const std::string shards = scratch("shards");
  std::ofstream(shards + "/manifest.json") << "{\"vocab_size\": 32000,";
  expect_words([&] { data::read_shard_manifest(shards); }, {shards + "/manifest.json: not valid JSON (line 1, column"});
  std::ofstream(shards + "/manifest.json") << "{\"vocab_size\": \"32000\"}";
  expect_words([&] { data::read_shard_manifest(shards); },
               {shards + "/manifest.json: 'vocab_size' must be an integer, got the string \"32000\""});


  const std::string folder = scratch("config_json");
  nlohmann::json c = nlohmann::json::parse(std::ifstream(test::source_path("tests/golden/llama_gqa_tiny/config.json")));
  std::string text = c.dump();
  const std::string theta = "\"rope_theta\":10000.0";
  ASSERT_NE(text.find(theta), std::string::npos) << text;
  text.replace(text.find(theta), theta.size(), "\"rope_theta\":1e400");
  std::ofstream(folder + "/config.json") << text;
  expect_words([&] { ckpt::read_hf_llama_config(folder); },
               {folder + "/config.json: not valid JSON: the number '1e400' is out of range"});

  c["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", "yes"}};
  std::ofstream(folder + "/config.json") << c.dump();
  expect_words([&] { ckpt::is_bnb_4bit_folder(folder); },
               {folder + "/config.json: quantization_config: 'load_in_8bit' must be true or false, got the string "
                         "\"yes\""});
}

TEST(JsonInputs, ACheckpointManifestWithoutTheModelSaysWhichKey) {
  // A whole manifest as the writer makes it, then without "model".
  const std::string dir = scratch("manifest");
  nlohmann::json m = {{"format", "fsdp_train.checkpoint"},
                      {"format_version", 1},
                      {"state",
                       {{"step", 3}, {"samples_seen", 3}, {"tokens_seen", 3}, {"train_seed", 1}, {"data_seed", 1}}},
                      {"strategy", "FULL_SHARD"},
                      {"world_size", 1},
                      {"shard_group_size", 1},
                      {"files", nlohmann::json::array()},
                      {"units", nlohmann::json::array()}};
  expect_words([&] { ckpt::parse_manifest(m.dump(), dir + "/manifest.json"); },
               {dir + "/manifest.json: malformed manifest: key 'model' not found"});
}

TEST(JsonInputs, ATraceCutShortIsNamedWithWhereItBreaks) {
  const std::string dir = scratch("traces");
  std::ofstream(dir + "/rank_0.trace.json") << "{\"traceEvents\": [{\"name\": \"step\", \"ph\": \"X\"";
  expect_words([&] { obs::merge_traces(dir, dir + "/merged.json"); },
               {dir + "/rank_0.trace.json: not valid JSON (line 1, column", "(a trace cut short?)"});
}

TEST(JsonInputs, ParseErrorsKeepThePlaceAndTheReasonOnly) {
  expect_words([] { json_file::parse("{\"a\": tru}", "x.json"); },
               {"x.json: not valid JSON (line 1, column", "invalid literal"});
  expect_words([] { json_file::parse("", "empty.json"); }, {"empty.json: not valid JSON ("});
  EXPECT_EQ(json_file::parse("{\"a\": [1, 2]}", "ok.json")["a"][1], 2);
}

}  // namespace
}  // namespace fsdp
