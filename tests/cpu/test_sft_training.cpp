// Training on masked data: the mask reaches the loss (the same tokens without it give another
// loss), trained_tokens counts the targets that carry loss, and the validation loss is over
// trained targets too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../common/local_trainer.h"
#include "../common/masked_corpus.h"

namespace fsdp {
namespace {

config::Config sft_config(const std::string& data, bool packing, int seq_len = 32) {
  const std::vector<std::string> o = {
      "model.preset=tiny",      "model.num_layers=2", "train.seq_len=" + std::to_string(seq_len), "train.micro_batch_size=4",
      "train.max_steps=2",      "logging.metrics=false", "checkpoint.resume=none", "data.source=shards",
      "data.path=" + data,      "data.val_path=" + data, "eval.split=train",
      std::string("data.packing=") + (packing ? "true" : "false"), "run.dir=/tmp/fsdp_sft_training_run"};
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

TEST(SftTraining, TheMaskIsWhatTheLossSees) {
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string masked = (tmp / "fsdp_sft_masked").string(), whole = (tmp / "fsdp_sft_whole").string();
  test::write_masked_corpus(masked, 48, 33, 1024, 11, /*with_mask=*/true);
  test::write_masked_corpus(whole, 48, 33, 1024, 11, /*with_mask=*/false);
  for (const bool packing : {true, false}) {
    test::LocalTrainer a(sft_config(masked, packing));
    test::LocalTrainer b(sft_config(whole, packing));
    const obs::StepMetrics ma = a->train_step(), mb = b->train_step();
    EXPECT_EQ(ma.tokens, 4 * 32);
    EXPECT_LT(ma.trained_tokens, mb.trained_tokens) << "packing " << packing;
    // Without packing the pads are masked in both; packed, every target of the unmasked one trains.
    if (packing) EXPECT_EQ(mb.trained_tokens, 4 * 32);
    // An untrained model predicts every token near ln(1024), so the losses differ a little; the
    // gradients, from other tokens, a lot.
    EXPECT_NE(ma.loss, mb.loss) << "packing " << packing;
    EXPECT_GT(std::abs(ma.grad_norm - mb.grad_norm), 0.05 * mb.grad_norm)
        << "packing " << packing << ": " << ma.grad_norm << " vs " << mb.grad_norm;
    const double val = a->evaluate(1);
    EXPECT_TRUE(std::isfinite(val) && val > 0) << val;
  }
}

// The gradient is the mean over trained targets: padding rows further (every example fits
// both windows, the pads masked) changes neither the loss nor the gradient norm. Dividing
// by the batch's target positions instead (as the trainer did before it counted trained
// targets) would halve the gradient at twice the window.
TEST(SftTraining, PaddingChangesNeitherLossNorGradient) {
  const std::string dir = (std::filesystem::temp_directory_path() / "fsdp_sft_padding").string();
  test::write_masked_corpus(dir, 32, 33, 1024, 5);
  test::LocalTrainer a(sft_config(dir, false, 32));
  test::LocalTrainer b(sft_config(dir, false, 64));
  for (int step = 1; step <= 2; ++step) {
    const obs::StepMetrics ma = a->train_step(), mb = b->train_step();
    EXPECT_EQ(ma.trained_tokens, mb.trained_tokens) << "step " << step;
    EXPECT_NEAR(ma.loss, mb.loss, 1e-5 * ma.loss) << "step " << step;
    EXPECT_NEAR(ma.grad_norm, mb.grad_norm, 1e-4 * ma.grad_norm) << "step " << step;
  }
}

}  // namespace
}  // namespace fsdp
