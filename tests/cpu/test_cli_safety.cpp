// Bad input through the command line, as a user (or an attacker) gives it: each refusal is
// one line naming the file, key or rank, with the documented exit code (2 for the config,
// 1 for a run that cannot start), before any step, never a crash, a hang or internal text
// (the failed check and the source file are for logging.level: debug only).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = test::source_path("configs/tiny.yaml") + " --set data.source=synthetic";

// Runs fsdp_train with `args` (under `timeout`, so a hang fails the test instead of the
// suite), in a fresh directory per test.
test::CommandResult run(const std::string& args, int timeout_s = 60) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string log = fs::temp_directory_path() / (std::string("fsdp_cli_safety_") + info->name() + ".log");
  return test::run_command("timeout -k 5 " + std::to_string(timeout_s) + " " + std::string(FSDP_TRAIN_BIN) + " " + args,
                           log);
}

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_cli_safety_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// One user-facing line: the exit code, the words, no step ran, no internals.
void expect_refusal(const test::CommandResult& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, code) << r.out;
  for (const std::string& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << p << "\n" << r.out;
  EXPECT_EQ(r.out.find("step      1/"), std::string::npos) << "a step ran:\n" << r.out;
  EXPECT_EQ(r.out.find("check `"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("src/"), std::string::npos) << r.out;
}

std::string golden_folder(const std::string& name) {
  const std::string dir = scratch(name);
  for (const auto& e : fs::directory_iterator(test::source_path("tests/golden/llama_gqa_tiny")))
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  return dir;
}

const std::string kOnGolden = " --set train.seq_len=32 --set train.micro_batch_size=2 --set eval.batches=1"
                              " --set checkpoint.resume=none --set train.max_steps=1 --set model.init_from=";

TEST(CliSafety, ZeroHeadsInConfigJsonIsAnErrorNotSigfpe) {
  const std::string dir = golden_folder("zero_heads");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  j["num_attention_heads"] = 0;
  std::ofstream(dir + "/config.json") << j.dump();
  const std::string why = dir + "/config.json: 'num_attention_heads' must be in [1, 4096], got 0";
  for (const char* command : {"train", "eval"})
    expect_refusal(run(std::string(command) + " --config " + kTiny + kOnGolden + dir + " --set run.dir=" + dir + "/run"),
                   1, {why});
  expect_refusal(run("generate --checkpoint " + dir + " --tokenizer " +
                     test::source_path("tests/golden/hf_export/tokenizer.model") + " --prompt hi"),
                 1, {why});
}

TEST(CliSafety, AFifoAsAModelFileOrATokenShardIsRefusedNotWaitedOn) {
  const std::string model = golden_folder("fifo_model");
  fs::remove(model + "/model-00002-of-00002.safetensors");
  ASSERT_EQ(::mkfifo((model + "/model-00002-of-00002.safetensors").c_str(), 0644), 0);
  const auto t0 = std::chrono::steady_clock::now();
  expect_refusal(run("eval --config " + kTiny + kOnGolden + model, 30), 1,
                 {model + "/model-00002-of-00002.safetensors is a FIFO (named pipe), not a regular file"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));

  const std::string data = scratch("fifo_shard");
  std::ofstream(data + "/train_00000.idx") << "not read";
  ASSERT_EQ(::mkfifo((data + "/train_00000.bin").c_str(), 0644), 0);
  expect_refusal(run("train --config " + test::source_path("configs/tiny.yaml") + " --set data.path=" + data +
                         " --set run.dir=" + data + "/run",
                     30),
                 1, {"is a FIFO (named pipe), not a regular file"});
}

// A read-only or non-directory output was found at the first save: with the default
// interval, after the whole run. Now before the model is even built.
TEST(CliSafety, UnwritableOutputsFailBeforeTheFirstStep) {
  const std::string dir = scratch("outputs");
  std::ofstream(dir + "/file") << "x";  // a file where a directory should be (root ignores chmod)
  expect_refusal(run("train --config " + kTiny + " --set train.max_steps=3 --set run.dir=" + dir +
                     "/run --set checkpoint.dir=" + dir + "/file/ckpt"),
                 1, {"checkpoint.dir " + dir + "/file/ckpt: cannot create it: Not a directory"});
  expect_refusal(run("train --config " + kTiny + " --set train.max_steps=3 --set run.dir=" + dir + "/file"), 1,
                 {"run.dir " + dir + "/file is a file, not a directory"});
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.jsonl"));
}

TEST(CliSafety, ModelBuildingErrorsAreConfigErrorsWithFileLineAndKey) {
  const std::string dir = scratch("shape");
  expect_refusal(run("train --config " + kTiny + " --set train.seq_len=4096 --set run.dir=" + dir), 2,
                 {"--set train.seq_len=4096: key 'train.seq_len': train.seq_len 4096 exceeds the model's max_seq_len "
                  "512"});
  expect_refusal(run("train --config " + kTiny + " --set model.num_heads=3 --set run.dir=" + dir), 2,
                 {"--set model.num_heads=3: key 'model.num_heads': model.hidden_size (128) must be divisible by "
                  "model.num_heads (3)"});
  // float16/bfloat16 compute where the run lands on the CPU: this machine has no GPU.
  const auto r = run("train --config " + kTiny + " --set train.dtype=bfloat16 --set run.dir=" + dir);
  if (r.out.find("step ") != std::string::npos) GTEST_SKIP() << "a GPU is visible here";
  expect_refusal(r, 2, {"--set train.dtype=bfloat16: key 'train.dtype' is bfloat16, which needs train.device cuda"});
  expect_refusal(run("train --config " + kTiny + " --set train.device=cuda --set run.dir=" + dir), 2,
                 {"--set train.device=cuda: key 'train.device' is cuda but"});
  // The context of a model folder is known once its config.json is read (64 positions).
  const std::string model = golden_folder("shape_model");
  expect_refusal(run("eval --config " + kTiny + kOnGolden + model + " --set train.seq_len=100"), 2,
                 {"--set train.seq_len=100: key 'train.seq_len' 100 exceeds the model's max_seq_len 64 "
                  "(max_position_embeddings of model.init_from)"});
}

TEST(CliSafety, AbsurdLoaderBoundsAndASecondYamlDocumentAreConfigErrors) {
  expect_refusal(run("train --config " + kTiny + " --set data.prefetch=1000000000"), 2,
                 {"--set data.prefetch=1000000000: key 'data.prefetch' must be in [0, 1024], got 1000000000"});
  const std::string dir = scratch("two_docs");
  std::ofstream(dir + "/two.yaml") << "train:\n  max_steps: 5\n---\ntrain:\n  max_steps: 500000\n";
  expect_refusal(run("train --config " + dir + "/two.yaml"), 2, {dir + "/two.yaml:4: a second YAML document"});
}

TEST(CliSafety, APresetThatAModelFolderOverridesIsNamed) {
  const std::string model = golden_folder("preset_model");
  const auto r = run("eval --config " + kTiny + kOnGolden + model + " --set model.preset=llama2_7b");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string warning = "model.preset llama2_7b is not used: the shape comes from model.init_from " + model +
                              "/config.json (vocab_size 96 there, 32000 in the preset)";
  const size_t first = r.out.find(warning);
  EXPECT_NE(first, std::string::npos) << r.out;
  // Once per run, though the model is resolved at start-up, by the memory check and by the trainer.
  EXPECT_EQ(r.out.find(warning, first + 1), std::string::npos) << r.out;
}

TEST(CliSafety, AMissingLoadDirIsAnError) {
  const std::string dir = scratch("load_dir");
  expect_refusal(run("train --config " + kTiny + " --set run.dir=" + dir + " --set checkpoint.load_dir=" + dir +
                     "/pretrained"),
                 2, {"key 'checkpoint.load_dir' is " + dir + "/pretrained, which does not exist"});
}

}  // namespace
}  // namespace fsdp
