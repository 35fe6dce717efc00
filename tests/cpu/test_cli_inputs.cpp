// Bad input through the command line, second round (issue 26): each refusal has the
// documented exit code and one line naming the file, key or flag, never a hang, a crash or a
// library's text ("filesystem error: ...", "basic_filebuf::underflow").
//   - a FIFO or /dev/zero wherever a file is read: --config, metrics.jsonl on resume, an
//     adapter_config.json (lora.init_from, generate --adapter), export --tokenizer (also a
//     directory), trace-merge's rank trace: refused by name within seconds;
//   - run.dir with a 300-byte component, past PATH_MAX, or a symlink loop; prepare --output
//     under a file: the key or flag named, in words;
//   - usage errors exit 2 naming the flag: prepare --workers 100000 (once SIGSEGV) and
//     --text-field "", export --max-shard-size 0.1, eval --split "" (once evaluated val);
//   - a layout error is 2 whether `plan` or `train` finds it (plan --ranks 3 with HYBRID_SHARD
//     and shard_group_size 2 once said it fits);
//   - prepare of random bytes named .txt: not UTF-8, so bad lines under --max-bad-fraction;
//   - resume: auto whose only checkpoint has a truncated manifest: a broken checkpoint of
//     this run, skipped with a warning, not "a checkpoint of another run".
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = test::source_path("configs/tiny.yaml") +
                          " --set data.source=synthetic --set train.seq_len=32 --set train.micro_batch_size=2"
                          " --set train.grad_accum_steps=1 --set train.eval_every=0";

// fsdp_train with `args` under `timeout` (a hang fails the test, not the suite).
test::CommandResult run(const std::string& args, int timeout_s = 60) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  static int n = 0;
  const std::string log = fs::temp_directory_path() /
                          (std::string("fsdp_cli_inputs_") + info->name() + "_" + std::to_string(++n) + ".log");
  return test::run_command("timeout -k 5 " + std::to_string(timeout_s) + " " + std::string(FSDP_TRAIN_BIN) + " " + args,
                           log);
}

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_cli_inputs_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string fifo(const std::string& path) {
  fs::remove_all(path);
  EXPECT_EQ(::mkfifo(path.c_str(), 0644), 0) << path;
  return path;
}

// The exit code, the words, one error line in the one format ('fsdp_train <command>: error:
// ...', issue 31), nothing trained, no internals or library text.
void expect_refusal(const test::CommandResult& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, code) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)fsdp_train [a-z-]+: error: ")))
      << "no 'fsdp_train <command>: error: ' line:\n" << r.out;
  for (const std::string& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << p << "\n" << r.out;
  EXPECT_EQ(r.out.find("step      1/"), std::string::npos) << "a step ran:\n" << r.out;
  for (const char* leak : {"check `", "src/", "filesystem error", "json.exception", "basic_filebuf"})
    EXPECT_EQ(r.out.find(leak), std::string::npos) << leak << "\n" << r.out;
}

// A FIFO must be refused, not waited on: well before the test's own timeout.
template <typename F>
void within_seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25));
}

TEST(CliInputs, AFifoOrDevZeroAsTheConfigIsRefused) {
  const std::string dir = scratch("config");
  within_seconds([&] {
    expect_refusal(run("train --config " + fifo(dir + "/pipe.yaml"), 30), 2,
                   {dir + "/pipe.yaml: cannot open config file: it is a FIFO (named pipe), not a regular file"});
    expect_refusal(run("train --config /dev/zero", 30), 2,
                   {"/dev/zero: cannot open config file: it is a character device, not a regular file"});
  });
}

TEST(CliInputs, AFifoAsMetricsJsonlOnResumeIsRefused) {
  const std::string dir = scratch("metrics");
  ASSERT_EQ(run("train --config " + kTiny + " --set train.max_steps=2 --set run.dir=" + dir).code, 0);
  fifo(dir + "/metrics.jsonl");
  within_seconds([&] {
    expect_refusal(run("train --config " + kTiny + " --set train.max_steps=3 --set run.dir=" + dir, 30), 1,
                   {dir + "/metrics.jsonl is a FIFO (named pipe), not a regular file"});
  });
}

TEST(CliInputs, AFifoAsAdapterConfigIsRefusedForTrainingAndGenerate) {
  const std::string adapter = scratch("adapter");
  fs::copy_file(test::source_path("tests/golden/lora_tiny/r4_alpha8/adapter_model.safetensors"),
                adapter + "/adapter_model.safetensors");
  fifo(adapter + "/adapter_config.json");
  const std::string base = test::source_path("tests/golden/llama_gqa_tiny");
  const std::string why = adapter + "/adapter_config.json is a FIFO (named pipe), not a regular file";
  within_seconds([&] {
    expect_refusal(run("train --config " + kTiny + " --set train.max_steps=1 --set model.init_from=" + base +
                           " --set lora.enabled=true --set lora.rank=4 --set lora.alpha=8 --set lora.init_from=" +
                           adapter + " --set run.dir=" + adapter + "/run",
                       30),
                   1, {why});
    expect_refusal(run("generate --checkpoint " + base + " --adapter " + adapter + " --tokenizer " +
                           test::source_path("tests/golden/hf_export/tokenizer.model") + " --prompt hi",
                       30),
                   1, {why});
  });
}

// A folder is a tokenizer's folder (tokenizer.json or tokenizer.model in it), never read as a file.
TEST(CliInputs, ExportTokenizerMustBeARegularFile) {
  const std::string dir = scratch("export");
  ASSERT_EQ(run("train --config " + kTiny + " --set train.max_steps=1 --set run.dir=" + dir).code, 0);
  const std::string ckpt = dir + "/checkpoints";
  within_seconds([&] {
    expect_refusal(
        run("export --checkpoint " + ckpt + " --output " + dir + "/hf1 --tokenizer " + fifo(dir + "/tok"), 30),
                   1, {"tokenizer model: " + dir + "/tok is a FIFO (named pipe), not a regular file"});
  });
  expect_refusal(run("export --checkpoint " + ckpt + " --output " + dir + "/hf2 --tokenizer " + dir),
                 1, {"tokenizer folder '" + dir + "' holds neither tokenizer.json nor tokenizer.model"});
  EXPECT_FALSE(fs::exists(dir + "/hf1"));
  expect_refusal(run("export --checkpoint " + ckpt + " --output " + dir + "/hf3 --max-shard-size 0.1"), 2,
                 {"--max-shard-size needs a size of at least one byte", "not '0.1'"});
}

TEST(CliInputs, TraceMergeRefusesAFifoRankTrace) {
  const std::string dir = scratch("traces");
  fifo(dir + "/rank_0.trace.json");
  within_seconds([&] {
    expect_refusal(run("trace-merge " + dir, 30), 1,
                   {dir + "/rank_0.trace.json is a FIFO (named pipe), not a regular file"});
  });
}

TEST(CliInputs, RunDirsTheFilesystemCannotHoldAreNamedByKey) {
  const std::string dir = scratch("names");
  const std::string long_part = dir + "/" + std::string(300, 'x');
  expect_refusal(run("train --config " + kTiny + " --set run.dir=" + long_part), 1,
                 {"run.dir " + long_part + ": cannot create it: File name too long"});
  std::string deep = dir;
  while (deep.size() < 5000) deep += "/" + std::string(200, 'd');
  expect_refusal(run("train --config " + kTiny + " --set run.dir=" + deep), 1,
                 {"run.dir " + deep + ": cannot create it: File name too long"});
  fs::create_symlink(dir + "/loop", dir + "/loop");
  expect_refusal(run("train --config " + kTiny + " --set run.dir=" + dir + "/loop/run"), 1,
                 {"run.dir " + dir + "/loop/run: cannot create it: Too many levels of symbolic links"});
}

TEST(CliInputs, PrepareUsageErrorsAndItsOutputName) {
  const std::string dir = scratch("prepare");
  std::ofstream(dir + "/a.txt") << "some text\n";
  const std::string tok = " --tokenizer " + test::source_path("tests/golden/hf_export/tokenizer.model");
  expect_refusal(run("prepare" + tok + " --output " + dir + "/out --workers 100000 " + dir + "/a.txt"), 2,
                 {"--workers needs a whole number from 1 to 1024, not '100000'"});
  expect_refusal(run("prepare" + tok + " --output " + dir + "/out --text-field '' " + dir + "/a.txt"), 2,
                 {"--text-field needs the name of the JSONL field holding the text, not ''"});
  std::ofstream(dir + "/file") << "x";
  expect_refusal(run("prepare" + tok + " --output " + dir + "/file/sub/out " + dir + "/a.txt"), 1,
                 {"--output " + dir + "/file/sub/out: cannot create " + dir + "/file/sub: Not a directory"});
}

TEST(CliInputs, RandomBytesAreNotTextToPrepare) {
  const std::string dir = scratch("binary");
  std::mt19937 rng(7);
  std::string bytes(100 * 1024, '\0');
  for (char& c : bytes) c = char(rng());
  std::ofstream(dir + "/random.txt", std::ios::binary) << bytes;
  const std::string prepare = "prepare --tokenizer " + test::source_path("tests/golden/hf_export/tokenizer.model");
  // Once 174k tokens of byte pieces without a word; now every paragraph is a bad line.
  expect_refusal(run(prepare + " --output " + dir + "/out " + dir + "/random.txt"), 1,
                 {dir + "/random.txt:1: invalid UTF-8 at byte", "iconv -t UTF-8"});
  EXPECT_FALSE(fs::exists(dir + "/out"));
  // One binary paragraph among 200 of text: a bad line, counted against --max-bad-fraction.
  std::string mixed;
  for (int i = 0; i < 200; ++i) mixed += "the cat sat on the mat " + std::to_string(i) + "\n\n";
  mixed += "caf\xE9 au lait\n";  // Latin-1, not UTF-8
  std::ofstream(dir + "/mixed.txt", std::ios::binary) << mixed;
  expect_refusal(run(prepare + " --output " + dir + "/out " + dir + "/mixed.txt"), 1,
                 {"1 of 201 lines are malformed, too long or not UTF-8, more than --max-bad-fraction 0.001 allows",
                  dir + "/mixed.txt:401: invalid UTF-8 at byte 3"});
  const auto r = run(prepare + " --max-bad-fraction 0.01 --output " + dir + "/out " + dir + "/mixed.txt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipped 1 malformed, over-long or non-UTF-8 line(s) of 201"), std::string::npos) << r.out;
}

TEST(CliInputs, EvalSplitMustNameASplit) {
  expect_refusal(run("eval --config " + kTiny + " --split ''"), 2, {"--split needs a split name"});
}

TEST(CliInputs, PlanRefusesTheLayoutTrainRefuses) {
  const std::string hybrid = " --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.shard_group_size=2";
  const std::string why = "key 'fsdp.shard_group_size' is 2, which does not divide the world size 3";
  expect_refusal(run("plan --config " + kTiny + hybrid + " --ranks 3"), 2, {why});
  EXPECT_EQ(run("plan --config " + kTiny + hybrid + " --ranks 4").code, 0);
  // One process is a world of one: the same words from train, exit 2 (nothing ran).
  expect_refusal(run("train --config " + kTiny + " --set fsdp.sharding_strategy=HYBRID_SHARD"
                     " --set fsdp.shard_group_size=3 --set run.dir=" + scratch("layout")),
                 2, {"key 'fsdp.shard_group_size' is 3, which does not divide the world size 1"});
}

TEST(CliInputs, ATruncatedManifestOfTheOnlyCheckpointIsBrokenNotForeign) {
  const std::string dir = scratch("truncated");
  const std::string args = "train --config " + kTiny + " --set checkpoint.interval=1 --set run.dir=" + dir;
  ASSERT_EQ(run(args + " --set train.max_steps=2 --set checkpoint.keep_last=1").code, 0);
  const std::string manifest = dir + "/checkpoints/step_2/manifest.json";
  fs::resize_file(manifest, 100);
  const auto r = run(args + " --set train.max_steps=3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipping checkpoint " + dir + "/checkpoints/step_2: " + manifest + ": not valid JSON (line"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step_2 is a broken checkpoint (its manifest.json cannot be read; see above) and was skipped; "
                       "no earlier checkpoint verifies, so this run starts from step 0"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("of another run"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_3/manifest.json"));
}

}  // namespace
}  // namespace fsdp
