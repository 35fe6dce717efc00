// A newcomer's first hour (issue 31), through the binary as a user runs it: runs that would
// exit 0 having done nothing say so, hints lead somewhere, the README's exit codes hold for
// every refusal before the first step (2: bad config or command line, nothing ran), and
// the conventions users bring (train.log, config.yaml, an ETA, did-you-mean on flags).
// Each run is a 2-layer model of 64 wide on 16-token sequences: a step takes milliseconds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fsdp/config/config.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

test::CommandResult run(const std::string& args, const std::string& cwd = "", int timeout_s = 90) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string log = fs::temp_directory_path() / (std::string("fsdp_first_hour_") + info->name() + ".log");
  return test::run_command((cwd.empty() ? "" : "cd " + cwd + " && ") + "timeout -k 5 " + std::to_string(timeout_s) +
                               " " + std::string(FSDP_TRAIN_BIN) + " " + args,
                           log);
}

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_first_hour_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A small config file in `dir` (config.yaml there), training `dir`/run on `data`.
std::string small_config(const std::string& dir, const std::string& data = "  source: synthetic\n") {
  const std::string path = dir + "/small.yaml";
  std::ofstream(path) << "run:\n  dir: " << dir << "/run\n"
                      << "model:\n  preset: tiny\n  num_layers: 2\n  hidden_size: 64\n  intermediate_size: 96\n"
                      << "  num_heads: 4\n  num_kv_heads: 2\n  vocab_size: 256\n"
                      << "data:\n" << data
                      << "train:\n  max_steps: 2\n  micro_batch_size: 2\n  seq_len: 16\n  log_every: 1\n"
                      << "optim:\n  warmup_steps: 1\neval:\n  batches: 1\n";
  return path;
}

bool has(const test::CommandResult& r, const std::string& part) { return r.out.find(part) != std::string::npos; }

// One line the user reads, the exit code the README promises, and no step ran.
void expect_refused(const test::CommandResult& r, int code, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, code) << r.out;
  for (const std::string& p : parts) EXPECT_TRUE(has(r, p)) << p << "\n" << r.out;
  EXPECT_FALSE(has(r, "step      1/")) << "a step ran:\n" << r.out;
  EXPECT_FALSE(has(r, "src/")) << r.out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- Looks like success, did nothing ---------------------------------------------------------

// The README's profiling command after the quick start resumed the finished run, trained
// nothing, and exited 0 without a word about the trace, snapshot and TensorBoard it asked for.
TEST(FirstHour, OutputsAFinishedRunCannotProduceAreWarned) {
  const std::string dir = scratch("profiling");
  const std::string cfg = small_config(dir);
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  // The README's window (steps 3-5 of a 300-step run) scaled down: step 1 of a 2-step run.
  const auto r = run("train --config " + cfg +
                     " --set logging.tensorboard=true --set logging.profile_wait=0 --set logging.profile_warmup=0"
                     " --set logging.profile_active=1 --set logging.memory_snapshot_step=2");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* part : {"nothing to train", "[warning] trace: logging.profile_active traces steps 1-1, but this run "
                           "starts at step 3", "[warning] memory snapshot: logging.memory_snapshot_step 2 is before "
                           "this run's first step 3", "[warning] tensorboard: this run trains no step"})
    EXPECT_TRUE(has(r, part)) << part << "\n" << r.out;
  EXPECT_FALSE(fs::exists(dir + "/run/tensorboard")) << "an empty TensorBoard file";
}

// eval evaluated the seeded random initialisation of a run that does not exist, exit 0.
TEST(FirstHour, EvalRefusesWithoutAModelAndTakesACheckpoint) {
  const std::string dir = scratch("eval");
  const std::string cfg = small_config(dir);
  expect_refused(run("eval --config " + cfg + " --set run.dir=" + dir + "/nothing_here"), 2,
                 {"nothing to evaluate: no checkpoint in " + dir + "/nothing_here/checkpoints", "--checkpoint DIR",
                  "--init"});
  EXPECT_FALSE(has(run("eval --config " + cfg + " --set run.dir=" + dir + "/nothing_here"), "eval_loss"));
  const auto init = run("eval --config " + cfg + " --set run.dir=" + dir + "/nothing_here --init");
  EXPECT_EQ(init.code, 0) << init.out;
  EXPECT_TRUE(has(init, "eval_loss ")) << init.out;
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  // The run's own newest checkpoint, and the same through --checkpoint from anywhere; a
  // finished run's evaluation says nothing of training's "nothing to train".
  const auto own = run("eval --config " + cfg);
  EXPECT_EQ(own.code, 0) << own.out;
  EXPECT_FALSE(has(own, "nothing to train")) << own.out;
  const auto by_flag = run("eval --config " + cfg + " --set run.dir=" + dir + "/elsewhere --checkpoint " + dir +
                           "/run/checkpoints");
  EXPECT_EQ(by_flag.code, 0) << by_flag.out;
  const std::string line = own.out.substr(own.out.rfind("eval_loss "));
  EXPECT_TRUE(has(by_flag, line)) << line << "\n" << by_flag.out;
  expect_refused(run("eval --config " + cfg + " --checkpoint " + dir + "/nope"), 2,
                 {"--checkpoint " + dir + "/nope: no such checkpoint or folder"});
  const auto help = run("eval --help");
  EXPECT_TRUE(has(help, "--checkpoint DIR") && has(help, "--init") && has(help, "model.init_from")) << help.out;
}

// A config without a data section trained on the synthetic Markov chain with one info line.
TEST(FirstHour, AConfigWithoutDataIsRefusedNamingDataPath) {
  const std::string dir = scratch("no_data");
  const std::string cfg = small_config(dir, "  num_workers: 1\n");
  expect_refused(run("train --config " + cfg), 2,
                 {"key 'data.path' is not set", "data.source: synthetic"});
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints")) << "an empty checkpoints/ left behind";
}

// ---- Hints that lead into the next refusal ---------------------------------------------------

// "nothing to train ... set checkpoint.resume: none to start over" was refused (exit 1) as
// "another run's" checkpoints; the hint names both keys, and following it starts over.
TEST(FirstHour, NothingToTrainsHintStartsOver) {
  const std::string dir = scratch("start_over");
  const std::string cfg = small_config(dir);
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const auto again = run("train --config " + cfg);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(has(again, "set checkpoint.resume: none and checkpoint.overwrite: true")) << again.out;
  expect_refused(run("train --config " + cfg + " --set checkpoint.resume=none"), 2,
                 {"holds 1 checkpoint(s) of an earlier run", "set checkpoint.resume: none and checkpoint.overwrite: "
                  "true"});
  const auto over = run("train --config " + cfg + " --set checkpoint.resume=none --set checkpoint.overwrite=true");
  EXPECT_EQ(over.code, 0) << over.out;
  EXPECT_TRUE(has(over, "step      2/2")) << over.out;
}

// A mistyped data.path (or the repository's config run from elsewhere): the path as
// resolved and the directory it resolved from; no empty checkpoints/ left behind.
TEST(FirstHour, AMissingDataPathSaysWhereItLookedAndLeavesNothing) {
  const std::string dir = scratch("data_path");
  const std::string cfg = small_config(dir, "  path: data/demo/shardz\n");
  expect_refused(run("train --config " + cfg, dir), 2,
                 {cfg + ":", "key 'data.path' is 'data/demo/shardz', which is neither a folder of token shards",
                  "relative to the working directory " + dir + ": " + dir + "/data/demo/shardz",
                  "bash scripts/demo_corpus.sh"});
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints")) << "an empty checkpoints/ left behind";
}

// prepare's default held nothing out, and the next train (eval_every > 0) failed for lack
// of a validation split with a hint to run the same prepare again.
TEST(FirstHour, PrepareHoldsOutAValidationSplitByDefault) {
  const std::string dir = scratch("prepare");
  {
    std::ofstream text(dir + "/book.txt");
    for (int i = 0; i < 400; ++i) text << "Paragraph " << i << " of the book, with a few words in it.\n\n";
  }
  const std::string tok = test::source_path("tests/golden/hf_export/tokenizer.model");
  const auto p = run("prepare --tokenizer " + tok + " --output " + dir + "/shards " + dir + "/book.txt");
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_FALSE(fs::is_empty(dir + "/shards")) << p.out;
  bool val = false;
  for (const auto& e : fs::directory_iterator(dir + "/shards")) val |= e.path().filename().string().starts_with("val_");
  EXPECT_TRUE(val) << p.out;
  // Without a val split, the refusal names --val-fraction and train.eval_every (exit 2).
  const auto none = run("prepare --tokenizer " + tok + " --val-fraction 0 --output " + dir + "/noval " + dir +
                        "/book.txt");
  ASSERT_EQ(none.code, 0) << none.out;
  EXPECT_TRUE(has(none, "no validation split")) << none.out;
  const std::string cfg = small_config(dir, "  path: " + dir + "/noval\n");
  expect_refused(run("train --config " + cfg + " --set model.vocab_size=64 --set train.eval_every=1"), 2,
                 {"key 'train.eval_every' is 1, but there is nothing to evaluate on", "--val-fraction",
                  "train.eval_every: 0"});
}

// fsdp.shard_group_size 0 means the ranks of one node in the config; dist's own numbering
// (0 the world, -1 a node) leaked into the error.
TEST(FirstHour, ShardGroupSizeHasOneMeaningInItsError) {
  const std::string dir = scratch("shard_group");
  const auto r = run("train --config " + small_config(dir) +
                     " --set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.shard_group_size=3");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "or 0 for the ranks of one node")) << r.out;
  EXPECT_FALSE(has(r, "-1 for")) << r.out;
  EXPECT_FALSE(has(r, "0 for the whole world")) << r.out;
}

// plan of a config whose base model folder is not downloaded yet plans the preset's shape.
TEST(FirstHour, PlanWithoutTheModelFolderPlansThePreset) {
  const auto r = run("plan --config " + test::source_path("configs/qlora_llama2_7b.yaml") +
                     " --ranks 4 --device cuda --device-memory 24GB");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r, "note: model.init_from /models/Llama-2-7b-hf is not there")) << r.out;
  expect_refused(run("plan --config " + test::source_path("configs/tiny.yaml") + " --device-memory 80"), 2,
                 {"--device-memory '80' is not a size", "80GB"});
  EXPECT_TRUE(has(run("plan --help"), "80GiB = 80G")) << run("plan --help").out;
}

// ---- Exit codes the README promises: 2 = bad config or command line, nothing ran ------------
// One case per refusal before the first step that exited 1 (the README's table, docs/
// checkpoints-and-resume.md#exit-codes). The rows already at 2 (unknown keys, bad values, a
// plan that cannot fit, ...) are pinned by test_config.cpp, test_cli_safety.cpp and
// test_memory_plan.cpp; a shard group that does not divide the world is issue 26's.
TEST(ExitCodes, ResumeNoneIntoAUsedCheckpointDirIs2) {
  const std::string dir = scratch("rc_resume_none");
  const std::string cfg = small_config(dir);
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  expect_refused(run("train --config " + cfg + " --set checkpoint.resume=none"), 2, {"of an earlier run"});
  expect_refused(run("train --config " + cfg + " --set checkpoint.resume=" + dir + "/nope"), 2,
                 {"key 'checkpoint.resume' is " + dir + "/nope, which does not exist"});
}

TEST(ExitCodes, AMissingDataPathIs2) {
  const std::string dir = scratch("rc_data");
  expect_refused(run("train --config " + small_config(dir, "  path: " + dir + "/nowhere\n")), 2,
                 {"key 'data.path' is '" + dir + "/nowhere'"});
  expect_refused(run("eval --config " + small_config(dir, "  path: " + dir + "/nowhere\n") + " --init"), 2,
                 {"key 'data.path'"});
}

TEST(ExitCodes, AMissingValidationSplitIs2) {
  const std::string dir = scratch("rc_val");
  const std::string tok = test::source_path("tests/golden/hf_export/tokenizer.model");
  std::ofstream(dir + "/a.txt") << "one document of text, long enough for a window of sixteen tokens or more.\n";
  ASSERT_EQ(run("prepare --tokenizer " + tok + " --val-fraction 0 --output " + dir + "/shards " + dir + "/a.txt").code, 0);
  const std::string cfg = small_config(dir, "  path: " + dir + "/shards\n");
  const std::string vocab = " --set model.vocab_size=64";
  expect_refused(run("train --config " + cfg + vocab + " --set train.eval_every=1"), 2, {"key 'train.eval_every'"});
  expect_refused(run("eval --config " + cfg + vocab + " --init"), 2,
                 {"no token shards for split 'val'", "--val-fraction"});
  // Shards of another tokenizer than the model's vocabulary: the config's to fix, too.
  expect_refused(run("train --config " + cfg), 2, {"the tokenizer's vocab_size 64 differs from model.vocab_size 256"});
}

TEST(ExitCodes, ANonexistentInitFromIs2) {
  const std::string dir = scratch("rc_init_from");
  expect_refused(run("train --config " + small_config(dir) + " --set model.init_from=" + dir + "/Llama-2-7b-hf"), 2,
                 {"key 'model.init_from' is '" + dir + "/Llama-2-7b-hf', which does not exist"});
}

TEST(ExitCodes, GenerateWithANonexistentCheckpointIs2) {
  const std::string tok = test::source_path("tests/golden/hf_export/tokenizer.model");
  expect_refused(run("generate --checkpoint runs/nope --tokenizer " + tok + " --prompt hi", scratch("rc_generate")), 2,
                 {"--checkpoint runs/nope: no such checkpoint or folder"});
  expect_refused(run("generate --checkpoint " + test::source_path("tests/golden/llama_gqa_tiny") +
                     " --tokenizer nope.model --prompt hi"),
                 2, {"--tokenizer nope.model: no such file"});
}

// export into a non-empty folder exited 1 and had no --overwrite (prepare has one).
TEST(ExitCodes, ExportIntoANonEmptyFolderIs2AndOverwriteReplacesIt) {
  const std::string dir = scratch("rc_export");
  const std::string cfg = small_config(dir);
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  fs::create_directories(dir + "/hf");
  std::ofstream(dir + "/hf/old.txt") << "an earlier export";
  expect_refused(run("export --checkpoint " + dir + "/run/checkpoints --output " + dir + "/hf"), 2,
                 {"--output " + dir + "/hf exists and is not empty", "--overwrite"});
  EXPECT_TRUE(fs::exists(dir + "/hf/old.txt"));
  expect_refused(run("export --checkpoint " + dir + "/nope --output " + dir + "/hf2"), 2,
                 {"--checkpoint " + dir + "/nope: no such checkpoint or folder"});
  const auto over = run("export --checkpoint " + dir + "/run/checkpoints --output " + dir + "/hf --overwrite");
  EXPECT_EQ(over.code, 0) << over.out;
  EXPECT_FALSE(fs::exists(dir + "/hf/old.txt"));
  EXPECT_TRUE(fs::exists(dir + "/hf/config.json"));
}

// ---- Conventions users bring -----------------------------------------------------------------

// Rank 0's log goes to <run.dir>/train.log too (appended by a resumed run); the full
// effective config to <run.dir>/config.yaml, not the console; the step line has an ETA; no
// colour codes into a pipe; `logging.level: warning` as the log spells it.
TEST(FirstHour, TrainLogConfigYamlAndTheStepLine) {
  const std::string dir = scratch("logs");
  const std::string cfg = small_config(dir);
  const auto first = run("train --config " + cfg);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_FALSE(has(first, "\x1b[")) << "colour codes in a pipe";
  EXPECT_FALSE(has(first, "effective config\nrun:")) << "the whole config on the console";
  EXPECT_TRUE(has(first, "1 rank on 1 node")) << first.out;
  EXPECT_TRUE(has(first, " elapsed, ETA ")) << first.out;
  const std::string log = read_file(dir + "/run/train.log");
  EXPECT_NE(log.find("step      2/2"), std::string::npos) << log;
  EXPECT_EQ(log.find("\x1b["), std::string::npos);
  const config::Config effective = config::load_config(dir + "/run/config.yaml");
  EXPECT_EQ(effective.train.max_steps, 2);
  EXPECT_EQ(effective.model.hidden_size, 64);
  const auto second = run("train --config " + cfg + " --set train.max_steps=3 --set logging.level=warning");
  EXPECT_EQ(second.code, 0) << second.out;
  EXPECT_FALSE(has(second, "[info]")) << second.out;
  const std::string appended = read_file(dir + "/run/train.log");
  EXPECT_EQ(appended.substr(0, log.size()), log) << "a resumed run appends";
  EXPECT_NE(appended.find("learning-rate schedule differs from the checkpoint's (train.max_steps 2 -> 3)"),
            std::string::npos)
      << appended;
  const auto debug = run("train --config " + cfg + " --set train.max_steps=3 --set logging.level=debug");
  EXPECT_TRUE(has(debug, "effective config:\nrun:")) << debug.out;
}

// Flags get a did-you-mean as config keys do, and a config given without --config is named.
TEST(FirstHour, FlagsSuggestTheClosestOne) {
  expect_refused(run("generate --checkpoint x --max_new_tokens 5 --prompt hi"), 2,
                 {"unknown argument '--max_new_tokens' (did you mean --max-new-tokens?)"});
  expect_refused(run("train configs/tiny.yaml"), 2,
                 {"unexpected argument 'configs/tiny.yaml' (did you mean --config configs/tiny.yaml?)"});
  expect_refused(run("train --confg x.yaml"), 2, {"unknown argument '--confg' (did you mean --config?)"});
  expect_refused(run("export --outptu x"), 2, {"(did you mean --output?)"});
}

// Four error formats across the commands became one: "fsdp_train <command>: error: ...",
// a usage error with a pointer to the command's --help.
TEST(FirstHour, OneErrorFormatEverywhere) {
  const std::string dir = scratch("format");
  const std::string cfg = small_config(dir);
  const std::string tok = test::source_path("tests/golden/hf_export/tokenizer.model");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train --bogus", "fsdp_train train: error: unknown argument '--bogus' (see fsdp_train train --help)"},
      {"train --config " + cfg + " --set train.max_step=3", "fsdp_train train: error: --set train.max_step=3: unknown key"},
      {"train --config " + cfg + " --set model.init_from=" + dir + "/none", "fsdp_train train: error: --set model.init_from"},
      {"eval --config " + cfg, "fsdp_train eval: error: nothing to evaluate"},
      {"prepare --bogus", "fsdp_train prepare: error: unknown argument '--bogus' (see fsdp_train prepare --help)"},
      {"prepare --tokenizer " + tok + " --output " + dir + "/out " + dir + "/missing.txt", "fsdp_train prepare: error: "},
      {"generate --prompt hi", "fsdp_train generate: error: --checkpoint DIR is required (see fsdp_train generate --help)"},
      {"generate --checkpoint " + dir + " --tokenizer " + tok + " --prompt hi", "fsdp_train generate: error: "},
      {"export --checkpoint " + dir, "fsdp_train export: error: --output HF_DIR is required"},
      {"export --checkpoint " + dir + " --output " + dir + "/hf", "fsdp_train export: error: "},
      {"plan --ranks 0 --config " + cfg, "fsdp_train plan: error: --ranks needs a whole number"},
      {"plan --config " + cfg + " --set train.max_step=3", "fsdp_train plan: error: --set train.max_step=3"},
      {"trace-merge", "fsdp_train trace-merge: error: DIR (a run's trace directory) is required"},
      {"trace-merge " + dir + "/nothing", "fsdp_train trace-merge: error: "},
      {"bogus", "fsdp_train: error: unknown command 'bogus' (see fsdp_train --help)"},
  };
  for (const auto& [args, head] : cases) {
    const auto r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_TRUE(has(r, head)) << args << "\n" << r.out;
    EXPECT_FALSE(has(r, "\nerror: ") || r.out.starts_with("error: ")) << args << "\n" << r.out;
  }
  // A training run's final error is in its train.log too.
  run("train --config " + cfg + " --set data.source=shards --set data.path=" + dir + "/nowhere");
  EXPECT_NE(read_file(dir + "/run/train.log").find("fsdp_train train: error: "), std::string::npos);
}

}  // namespace
}  // namespace fsdp
