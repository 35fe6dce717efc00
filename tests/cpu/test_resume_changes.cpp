// What a resumed run changes against its checkpoint's run is said (issue 31: raising
// train.max_steps re-stretched the cosine schedule, and 2 ranks on a 1-rank checkpoint
// doubled the tokens per step, without a word), and a collapsed MoE router is too.
#include <gtest/gtest.h>

#include "fsdp/config/config.h"
#include "fsdp/obs/expert_load.h"
#include "fsdp/train/resume_changes.h"

namespace fsdp {
namespace {

config::Config demo(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"train.max_steps=300", "optim.lr=3e-3", "optim.min_lr=3e-4", "optim.warmup_steps=20",
                                "train.micro_batch_size=8", "train.grad_accum_steps=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("", "test", o);
}

TEST(ResumeChanges, TheSameRunContinuesWithoutAWord) {
  EXPECT_TRUE(train::resume_changes(demo(), 1, demo(), 1, 300).empty());
  // Another world size with the same global batch (8 x 2 x 1 = 4 x 2 x 2) is the same run.
  EXPECT_TRUE(train::resume_changes(demo(), 1, demo({"train.micro_batch_size=4"}), 2, 300).empty());
}

TEST(ResumeChanges, ARestretchedScheduleIsNamedWithOldAndNewValues) {
  const auto lines = train::resume_changes(demo(), 1, demo({"train.max_steps=500"}), 1, 300);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("the learning-rate schedule differs from the checkpoint's (train.max_steps 300 -> 500): the "
                          "lr of step 301 is "),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(", 3.000e-04 under the checkpoint's schedule"), std::string::npos) << lines[0];
  const auto lr = train::resume_changes(demo(), 1, demo({"optim.lr=1e-3", "optim.schedule=linear"}), 1, 100);
  ASSERT_EQ(lr.size(), 1u);
  EXPECT_NE(lr[0].find("optim.lr 0.003 -> 0.001, optim.schedule cosine -> linear"), std::string::npos) << lr[0];
}

TEST(ResumeChanges, AnotherGlobalBatchIsNamedWithItsTerms) {
  const auto lines = train::resume_changes(demo(), 1, demo(), 2, 300);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "the global batch differs from the checkpoint's: 32 sequences per step (micro_batch_size 8 x "
            "grad_accum_steps 2 x 2 ranks), the checkpoint's 16 (micro_batch_size 8 x grad_accum_steps 2 x 1 rank); "
            "set train.global_batch_size: 16 to keep it on any number of ranks");
}

TEST(ExpertLoadWatch, ACollapsedRouterIsSaidOnceAfterItsPatience) {
  obs::ImbalanceWatch watch(2.0, 3);
  EXPECT_EQ(watch.observe(1, {1.1, 3.9}), "");
  EXPECT_EQ(watch.observe(2, {1.2, 4.0}), "");
  EXPECT_EQ(watch.observe(3, {1.0, 1.5}), "");  // a balanced step starts the count again
  EXPECT_EQ(watch.observe(4, {2.5, 1.0}), "");
  EXPECT_EQ(watch.observe(5, {3.0, 1.0}), "");
  const std::string w = watch.observe(6, {1.0, 4.0});
  EXPECT_NE(w.find("the router has collapsed: layer 1's busiest expert took 4.00x the mean load at step 6"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("model.router_bias_update_rate"), std::string::npos) << w;  // the remedy that works (docs/mixtral.md)
  EXPECT_EQ(watch.observe(7, {4.0, 4.0}), "");  // once
}

}  // namespace
}  // namespace fsdp
