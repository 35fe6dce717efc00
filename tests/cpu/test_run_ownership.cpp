// A run owns its checkpoint.dir (Note [Run ownership] in train/run_ownership.h): another
// run's checkpoints stop a start (or are moved aside with checkpoint.overwrite), run ids
// in manifests and metrics.jsonl, rotation never deleting the checkpoint just written,
// checkpoint.load_dir, and a final save that failed under stop_on_error: false.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "../common/local_trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using test::ckpt_config;
using test::LocalTrainer;
using test::scratch;

using test::error_message;

std::string run_id_of(const std::string& checkpoint) {
  return ckpt::CheckpointReader(checkpoint).manifest().run_id;
}

// An older run with checkpoints at steps 2 and 4 in `dir`; returns its run id.
std::string older_run(const std::string& dir) {
  LocalTrainer t(ckpt_config(dir, {"train.max_steps=4", "checkpoint.interval=2", "logging.metrics=true"}));
  EXPECT_EQ(t->run(), 0);
  return t->run_id();
}

TEST(RunOwnership, ResumeNoneOverAnotherRunsCheckpointsIsRefusedNamingThem) {
  const std::string dir = scratch("own_refused");
  const std::string old_id = older_run(dir);
  const std::string msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=none"})); });
  // The same command run again with resume: none: the earlier run's checkpoints, and the
  // hint names both keys that start over (issue 31: "nothing to train ... set
  // checkpoint.resume: none" led straight into this refusal).
  for (const std::string& part :
       std::vector<std::string>{dir + "/checkpoints holds 2 checkpoint(s) of an earlier run",
                                "step_4 (run " + old_id + ")", "step_2", "checkpoint.resume: none starts a new run",
                                "set checkpoint.resume: none and checkpoint.overwrite: true"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  EXPECT_EQ(msg.find("another run"), std::string::npos) << msg;
  // A config to change, nothing ran: the config's error (exit 2 from the commands).
  EXPECT_THROW(LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=none"})), config::ConfigError);
  EXPECT_EQ(msg.find("check `"), std::string::npos) << msg;
  // Nothing was touched.
  EXPECT_EQ(ckpt::list_checkpoints(dir + "/checkpoints").size(), 2u);
  EXPECT_EQ(run_id_of(dir + "/checkpoints/step_4"), old_id);
}

TEST(RunOwnership, OverwriteMovesThemAsideAndTheNewRunKeepsItsWork) {
  const std::string dir = scratch("own_overwrite");
  const std::string old_id = older_run(dir);
  std::string new_id;
  {
    LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=none", "checkpoint.overwrite=true", "train.max_steps=3",
                                     "checkpoint.keep_last=1", "logging.metrics=true"}));
    new_id = t->run_id();
    EXPECT_NE(new_id, old_id);
    EXPECT_EQ(t->step(), 0);
    EXPECT_EQ(t->run(), 0);
  }
  // The new run's own checkpoint is there (keep_last 1 did not delete it for the old step 4).
  const auto kept = ckpt::list_checkpoints(dir + "/checkpoints");
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0], dir + "/checkpoints/step_3");
  EXPECT_EQ(run_id_of(kept[0]), new_id);
  // The old run's checkpoints and metrics are aside, whole.
  std::string aside;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    if (e.path().filename().string().starts_with("replaced-")) aside = e.path().string();
  ASSERT_FALSE(aside.empty());
  EXPECT_EQ(run_id_of(aside + "/step_4"), old_id);
  EXPECT_TRUE(fs::exists(aside + "/step_2/manifest.json"));
  int old_metrics = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("metrics.jsonl.replaced-")) ++old_metrics;
  EXPECT_EQ(old_metrics, 1);
  // metrics.jsonl holds the new run only, every line with its id.
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int>(), ++n);
    EXPECT_EQ(j["run_id"].get<std::string>(), new_id);
  }
  EXPECT_EQ(n, 3);
}

TEST(RunOwnership, AResumedRunKeepsItsRunId) {
  const std::string dir = scratch("own_resume");
  const std::string id = older_run(dir);
  LocalTrainer t(ckpt_config(dir, {"train.max_steps=6", "checkpoint.interval=2", "logging.metrics=true"}));
  EXPECT_EQ(t->run_id(), id);
  EXPECT_EQ(t->run(), 0);
  EXPECT_EQ(run_id_of(dir + "/checkpoints/step_6"), id);
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  std::set<std::string> ids;
  while (std::getline(in, line)) ids.insert(nlohmann::json::parse(line)["run_id"].get<std::string>());
  EXPECT_EQ(ids, std::set<std::string>{id});
}

// A resumed run that finds checkpoints of a different run id beside its own refuses too.
TEST(RunOwnership, AResumedRunRefusesCheckpointsOfAnotherRunId) {
  const std::string dir = scratch("own_mixed"), other = scratch("own_mixed_other");
  older_run(dir);
  older_run(other);
  fs::rename(other + "/checkpoints/step_2", dir + "/checkpoints/step_1");  // the other run's, at a lower step
  const std::string msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"train.max_steps=6"})); });
  EXPECT_NE(msg.find("holds 1 checkpoint(s) of another run: step_1 (run "), std::string::npos) << msg;
  EXPECT_NE(msg.find("This resumed run"), std::string::npos) << msg;
}

// Rotation keeps the checkpoint just written whatever steps the others have: here a copy of
// this run's step_4 under a higher step name (as a directory of several attempts may hold).
TEST(RunOwnership, RotationNeverDeletesTheCheckpointJustWritten) {
  const std::string dir = scratch("own_rotation");
  older_run(dir);
  fs::rename(dir + "/checkpoints/step_2", dir + "/checkpoints/step_100");
  LocalTrainer t(ckpt_config(dir, {"checkpoint.keep_last=1", "checkpoint.resume=" + dir + "/checkpoints/step_4"}));
  EXPECT_EQ(t->step(), 4);
  t->train_step();
  t->save_checkpoint();
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_5/manifest.json")) << "the checkpoint just written was deleted";
  EXPECT_EQ(ckpt::list_checkpoints(dir + "/checkpoints"), std::vector<std::string>{dir + "/checkpoints/step_5"});
}

TEST(RunOwnership, AMissingLoadDirOrResumePathIsAnError) {
  const std::string dir = scratch("own_missing");
  std::string msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"checkpoint.load_dir=" + dir + "/nowhere"})); });
  EXPECT_NE(msg.find("key 'checkpoint.load_dir' is " + dir + "/nowhere, which does not exist"), std::string::npos) << msg;
  fs::create_directories(dir + "/empty");
  msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"checkpoint.load_dir=" + dir + "/empty"})); });
  EXPECT_NE(msg.find("checkpoint.load_dir " + dir + "/empty holds no complete checkpoint"), std::string::npos) << msg;
  msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=" + dir + "/nowhere/step_3"})); });
  EXPECT_NE(msg.find("key 'checkpoint.resume' is " + dir + "/nowhere/step_3, which does not exist"), std::string::npos)
      << msg;
}

// A fine-tune starts from load_dir; requeued, it continues its own checkpoints in
// checkpoint.dir instead of starting over from load_dir.
TEST(RunOwnership, LoadDirStartsARunAndItsOwnCheckpointsContinueIt) {
  const std::string base = scratch("own_load_base"), dir = scratch("own_load_tune");
  const std::string id = older_run(base);
  const std::vector<std::string> tune = {"checkpoint.load_dir=" + base + "/checkpoints", "train.max_steps=6"};
  {
    LocalTrainer t(ckpt_config(dir, tune));
    EXPECT_EQ(t->resumed_from(), base + "/checkpoints/step_4");
    EXPECT_EQ(t->run_id(), id);
    t->train_step();
    t->save_checkpoint();
  }
  LocalTrainer t(ckpt_config(dir, tune));
  EXPECT_EQ(t->resumed_from(), dir + "/checkpoints/step_5");
  EXPECT_EQ(t->step(), 5);
}

// checkpoint.stop_on_error: false lets training go on past a failed save, but a run whose
// final state never reached the disk fails.
TEST(RunOwnership, AFailedFinalSaveFailsTheRunEvenWithStopOnErrorFalse) {
  const std::string dir = scratch("own_final");
  std::ofstream(dir + "/file") << "x";  // a file where a directory should be (root ignores chmod)
  LocalTrainer t(ckpt_config(dir, {"checkpoint.dir=" + dir + "/file/ckpt", "checkpoint.stop_on_error=false",
                                   "train.max_steps=2"}));
  const std::string msg = error_message([&] { t->run(); });
  EXPECT_NE(msg.find("the final checkpoint at step 2 could not be saved"), std::string::npos) << msg;
}

// An evaluation reads a checkpoint and writes none: it claims nothing.
TEST(RunOwnership, EvaluationClaimsNothing) {
  const std::string dir = scratch("own_eval");
  older_run(dir);
  LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=none"}), train::TrainerPurpose::Evaluate);
  EXPECT_EQ(t->step(), 0);
  EXPECT_EQ(ckpt::list_checkpoints(dir + "/checkpoints").size(), 2u);
}

}  // namespace
}  // namespace fsdp
