// A Hugging Face model folder as a corrupt download or an attacker would make it:
// config.json validated as strictly as the YAML config before any arithmetic runs on it
// (a zero head count once divided by zero), and shards named by the index, or found in
// the folder, that lie outside it (../, absolute paths, symlinks) refused by name. (FIFOs
// in a folder: test_cli_safety.cpp, which can time a hang out.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A copy of the golden tiny Llama folder (two shards and an index) in a fresh directory.
std::string golden_copy(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_folder_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(test::source_path("tests/golden/llama_gqa_tiny")))
    fs::copy_file(e.path(), dir / e.path().filename());
  return dir.string();
}

void edit_json(const std::string& path, const std::function<void(json&)>& edit) {
  json j = json::parse(std::ifstream(path));
  edit(j);
  std::ofstream(path) << j.dump(2);
}

using test::error_message;

TEST(ModelFolder, ConfigJsonIsValidatedBeforeAnyArithmetic) {
  const std::string dir = golden_copy("config_json"), path = dir + "/config.json";
  ASSERT_EQ(error_message([&] { ckpt::read_hf_llama_config(dir); }), "(no error)");
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["num_attention_heads"] = 0; }, "'num_attention_heads' must be in [1, 4096], got 0"},
      {[](json& j) { j["hidden_size"] = -48; }, "'hidden_size' must be in [1, 262144], got -48"},
      {[](json& j) { j["vocab_size"] = 96.5; }, "'vocab_size' must be an integer, got the number 96.5"},
      {[](json& j) { j["vocab_size"] = int64_t(1) << 40; }, "'vocab_size' must be in [1, 16777216], got 1099511627776"},
      {[](json& j) { j["num_hidden_layers"] = 1000000000; }, "'num_hidden_layers' must be in [1, 4096], got 1000000000"},
      {[](json& j) { j["num_hidden_layers"] = "2"; }, "'num_hidden_layers' must be an integer, got the string \"2\""},
      {[](json& j) { j["intermediate_size"] = json::array({88}); }, "'intermediate_size' must be an integer, got a list"},
      {[](json& j) { j["rope_theta"] = "big"; }, "'rope_theta' must be a number, got the string \"big\""},
      {[](json& j) { j["hidden_act"] = 5; }, "'hidden_act' must be a string, got number"},
      {[](json& j) { j["num_key_value_heads"] = 4; }, "num_attention_heads 6 is not divisible by num_key_value_heads 4"},
      {[](json& j) { j["head_dim"] = 0; }, "'head_dim' must be in [1, 262144], got 0"},
      {[](json& j) { j = json::array({1, 2}); }, "expected a JSON object of model settings, got a list"},
  };
  for (const auto& [damage, what] : cases) {
    fs::copy_file(test::source_path("tests/golden/llama_gqa_tiny/config.json"), path,
                  fs::copy_options::overwrite_existing);
    edit_json(path, damage);
    const std::string msg = error_message([&] { ckpt::read_hf_llama_config(dir); });
    EXPECT_EQ(msg, path + ": " + what);
  }
}

TEST(ModelFolder, IndexEntriesThatLeaveTheFolderAreRefusedByName) {
  const std::string dir = golden_copy("traversal"), index = dir + "/model.safetensors.index.json";
  const std::string tensor = "model.embed_tokens.weight";
  ASSERT_EQ(error_message([&] { ckpt::SafetensorsFolder f(dir); }), "(no error)");
  auto point_at = [&](const std::string& name) {
    fs::copy_file(test::source_path("tests/golden/llama_gqa_tiny/model.safetensors.index.json"), index,
                  fs::copy_options::overwrite_existing);
    edit_json(index, [&](json& j) { j["weight_map"][tensor] = name; });
    return error_message([&] { ckpt::SafetensorsFolder f(dir); });
  };
  const std::string entry = index + ": weight_map entry for tensor " + tensor;
  EXPECT_EQ(point_at("../../../../etc/passwd"),
            entry + " ('../../../../etc/passwd') climbs out of the model folder " + dir + " with '..': refused");
  EXPECT_EQ(point_at("/etc/passwd"), entry + " ('/etc/passwd') is an absolute path: a shard must be a file inside the "
                                             "model folder " + dir);
  // A symlink in the folder to a file outside it (a cloned repository may carry one).
  const std::string outside = fs::temp_directory_path() / "fsdp_folder_outside.safetensors";
  fs::copy_file(dir + "/model-00001-of-00002.safetensors", outside, fs::copy_options::overwrite_existing);
  fs::create_symlink(outside, dir + "/linked.safetensors");
  EXPECT_EQ(point_at("linked.safetensors"), entry + " ('linked.safetensors') is a symlink to " + outside +
                                                ", outside the model folder " + dir +
                                                ": refused (copy the file into the folder)");
}

TEST(ModelFolder, ASymlinkOutOfAFolderWithoutIndexIsRefusedToo) {
  const fs::path dir = fs::temp_directory_path() / "fsdp_folder_single";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string outside = fs::temp_directory_path() / "fsdp_folder_single_outside.safetensors";
  ckpt::write_safetensors(outside, {ckpt::WriteEntry{"x", "F32", {1}, "\0\0\0\0", 4}});
  fs::create_symlink(outside, dir / "model.safetensors");
  EXPECT_NE(error_message([&] { ckpt::SafetensorsFolder f(dir.string()); }).find("outside the model folder"),
            std::string::npos);
}

// The Hugging Face hub cache: every file of a snapshot is a symlink into the repository's
// blobs/ (models--org--name/snapshots/<rev>/x -> ../../blobs/<sha>). That is the model's own
// folder, and loads.
TEST(ModelFolder, AHubCacheSnapshotOfSymlinksIntoBlobsLoads) {
  const fs::path repo = fs::temp_directory_path() / "fsdp_folder_hub" / "models--org--tiny";
  fs::remove_all(repo.parent_path());
  const fs::path snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(snap);
  fs::create_directories(repo / "blobs");
  for (const auto& e : fs::directory_iterator(test::source_path("tests/golden/llama_gqa_tiny"))) {
    const std::string blob = "blob_" + e.path().filename().string();
    fs::copy_file(e.path(), repo / "blobs" / blob);
    fs::create_symlink(fs::path("../../blobs") / blob, snap / e.path().filename());
  }
  EXPECT_EQ(error_message([&] {
              ckpt::SafetensorsFolder f(snap.string());
              EXPECT_TRUE(f.contains("model.embed_tokens.weight"));
              EXPECT_EQ(ckpt::read_hf_llama_config(snap.string()).hidden_size, 48);
            }),
            "(no error)");
}

}  // namespace
}  // namespace fsdp
