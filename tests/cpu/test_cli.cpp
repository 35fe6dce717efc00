// The fsdp_train command line, run as a user runs it: exit codes, error messages that
// name file, line and key, --help / --version, eval's last line, and a short training
// run whose metrics.jsonl shows the loss falling.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fsdp {
namespace {

using Result = test::CommandResult;  // code, and stdout and stderr together

Result run(const std::string& args) {
  // One log per test: ctest runs the tests of this binary in parallel processes.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string log =
      std::filesystem::temp_directory_path() / (std::string("fsdp_cli_") + info->name() + ".log");
  return test::run_command(std::string(FSDP_TRAIN_BIN) + " " + args, log);
}

std::string write_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "fsdp_cli_configs";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// The demo config trains on the prepared demo corpus; these tests need no corpus, so
// they run it on the synthetic source.
const std::string kTiny = test::source_path("configs/tiny.yaml") + " --set data.source=synthetic";

TEST(Cli, VersionAndHelp) {
  Result v = run("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("fsdp_train "), std::string::npos);
  Result h = run("train --help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("train.max_steps"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("checkpoint.resume"), std::string::npos);
  const size_t header = h.out.find("Config keys");
  ASSERT_NE(header, std::string::npos) << h.out;
  EXPECT_EQ(h.out.find("Config keys", header + 1), std::string::npos) << "the keys' header printed twice:\n" << h.out;
  EXPECT_EQ(run("eval --help").code, 0);
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("fly").code, 2);
  EXPECT_EQ(run("train").code, 2);  // --config missing
}

TEST(Cli, UnknownKeyNamesFileLineAndSuggests) {
  const std::string path = write_config("unknown.yaml", "train:\n  max_steps: 5\n  micro_batchsize: 4\n");
  Result r = run("train --config " + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(path + ":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unknown key 'train.micro_batchsize'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did you mean 'train.micro_batch_size'"), std::string::npos) << r.out;
}

TEST(Cli, WrongTypeAndImpossibleValue) {
  const std::string typ = write_config("type.yaml", "optim:\n  lr: fast\n");
  Result r = run("train --config " + typ);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(typ + ":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'optim.lr'"), std::string::npos) << r.out;
  Result v = run("train --config " + kTiny + " --set train.max_steps=-3");
  EXPECT_EQ(v.code, 2);
  EXPECT_NE(v.out.find("train.max_steps"), std::string::npos) << v.out;
  Result m = run("train --config /nonexistent/x.yaml");
  EXPECT_EQ(m.code, 2);
  EXPECT_NE(m.out.find("/nonexistent/x.yaml"), std::string::npos) << m.out;
}

TEST(Cli, ModelShapeErrorsStopBeforeTraining) {
  Result r = run("train --config " + kTiny + " --set train.seq_len=4096 --set run.dir=/tmp/fsdp_cli_bad");
  EXPECT_EQ(r.code, 2);  // a config error: the resolved shape is checked with the config
  EXPECT_NE(r.out.find("--set train.seq_len=4096: key 'train.seq_len': train.seq_len 4096 exceeds the model's "
                       "max_seq_len 512"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "a step ran: " << r.out;
}

TEST(Cli, MissingDemoCorpusSaysHowToMakeIt) {
  // One line for the user, saying what to run; the internals (the failed check, the
  // source line) only in the debug log.
  const std::string args = "train --config " + test::source_path("configs/tiny.yaml") +
                           " --set data.path=/tmp/fsdp_cli_nothing/data/demo/shards --set run.dir=/tmp/fsdp_cli_nocorpus";
  Result r = run(args);
  EXPECT_EQ(r.code, 2);  // the config's error: nothing ran
  EXPECT_NE(r.out.find("key 'data.path' is '/tmp/fsdp_cli_nothing/data/demo/shards', which is neither a folder of "
                       "token shards"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("bash scripts/demo_corpus.sh"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("check `"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(".cpp:"), std::string::npos) << r.out;
  const auto log = std::filesystem::temp_directory_path() / "fsdp_cli_nocorpus_debug.log";
  Result debug = test::run_command("SPDLOG_LEVEL=debug " + std::string(FSDP_TRAIN_BIN) + " " + args, log.string());
  EXPECT_EQ(debug.code, 2);
}

TEST(Cli, EvalPrintsEvalLossLast) {
  // resume none: a checkpoint left in runs/tiny by the demo must not be what is evaluated.
  Result r = run("eval --config " + kTiny + " --set eval.batches=2 --set checkpoint.resume=none --init");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto pos = r.out.rfind("eval_loss ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n', pos), r.out.size() - 1) << "eval_loss is not the last line";
  EXPECT_NEAR(std::stod(r.out.substr(pos + 10)), std::log(1024.0), 0.1);
}

// A corpus without a val split (prepared from pre-tokenized ids, no --val-fraction): eval
// says which key to set, and --split train evaluates the training shards.
TEST(Cli, EvalOfShardsWithoutAValSplitNamesTheKeyAndTakesSplitTrain) {
  const auto dir = std::filesystem::temp_directory_path() / "fsdp_cli_eval_split";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream ids(dir / "ids.jsonl");
    for (int d = 0; d < 40; ++d) {
      nlohmann::json v = nlohmann::json::array();
      for (int i = 0; i < 30; ++i) v.push_back((d * 31 + i * 7) % 1024);
      ids << nlohmann::json{{"input_ids", v}}.dump() << "\n";
    }
  }
  const std::string corpus = (dir / "corpus").string();
  const Result p = run("prepare --vocab-size 1024 --output " + corpus + " " + (dir / "ids.jsonl").string());
  ASSERT_EQ(p.code, 0) << p.out;
  const std::string eval = "eval --config " + test::source_path("configs/tiny.yaml") +
                           " --set data.source=shards --set data.path=" + corpus +
                           " --set train.seq_len=32 --set eval.batches=2 --set checkpoint.resume=none --init";
  const Result missing = run(eval);
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("no token shards for split 'val'"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("point data.val_path"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("--val-fraction"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("--split train"), std::string::npos) << missing.out;
  const Result train_split = run(eval + " --split train");
  ASSERT_EQ(train_split.code, 0) << train_split.out;
  const auto pos = train_split.out.rfind("eval_loss ");
  ASSERT_NE(pos, std::string::npos) << train_split.out;
  EXPECT_NEAR(std::stod(train_split.out.substr(pos + 10)), std::log(1024.0), 0.2);  // an untrained model
  const Result by_key = run(eval + " --set eval.split=train");
  ASSERT_EQ(by_key.code, 0) << by_key.out;
  EXPECT_EQ(by_key.out.substr(by_key.out.rfind("eval_loss ")), train_split.out.substr(pos));
  const Result on_train = run("train --config " + kTiny + " --split train");
  EXPECT_EQ(on_train.code, 2) << on_train.out;
  EXPECT_NE(on_train.out.find("--split is an option of fsdp_train eval"), std::string::npos) << on_train.out;
}

TEST(Cli, TrainWritesFallingLossToMetricsJsonl) {
  const std::string dir = (std::filesystem::temp_directory_path() / "fsdp_cli_train").string();
  std::filesystem::remove_all(dir);
  Result r = run("train --config " + kTiny + " --set train.max_steps=40 --set train.eval_every=20 --set train.grad_accum_steps=1 --set run.dir=" +
                 dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step     40/40 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" elapsed, ETA 0:00) | loss"), std::string::npos) << r.out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 40u);
  for (const auto& key : {"step", "loss", "lr", "grad_norm", "tokens_per_sec"}) EXPECT_TRUE(rows[0].contains(key)) << key;
  EXPECT_TRUE(rows[19].contains("val_loss"));
  EXPECT_FALSE(rows[18].contains("val_loss"));
  EXPECT_LT(rows.back()["loss"].get<double>(), rows.front()["loss"].get<double>() - 1.5);
}

}  // namespace
}  // namespace fsdp
