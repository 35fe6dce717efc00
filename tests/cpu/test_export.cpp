// `fsdp_train export` end to end: a trained checkpoint becomes a Hugging Face folder that
// model.init_from reads back to the same bits (float32) or the bf16-rounded values
// (bfloat16), and that evaluates to the same loss; bad input exits with one message.
// That transformers reads what write_hf_llama writes, with matching logits, is proven in
// tests/cpu/test_hf_export.cpp against a transformers-made fixture.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/core/dtype.h"
#include "fsdp/train/trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

using Result = test::CommandResult;

Result run(const std::string& args, const std::string& log) {
  return test::run_command(std::string(FSDP_TRAIN_BIN) + " " + args, log);
}

const std::string kShape =
    " --config " FSDP_SOURCE_DIR "/configs/tiny.yaml --set data.source=synthetic --set model.num_layers=2"
    " --set train.seq_len=32 --set train.micro_batch_size=2 --set train.eval_every=0 --set eval.batches=2";

// A trained run of this test's own (ctest runs the tests in parallel processes): 3 steps,
// checkpoint at the end.
std::string trained_run() {
  const std::string d = (fs::temp_directory_path() /
                         ("fsdp_export_run_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
                            .string();
  fs::remove_all(d);
  const Result r = run("train" + kShape + " --set train.max_steps=3 --set run.dir=" + d, d + ".log");
  EXPECT_EQ(r.code, 0) << r.out;
  return d;
}

std::string fresh(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("fsdp_export_" + name)).string();
  fs::remove_all(d);
  return d;
}

// The masters a trainer initialised from `hf_dir` holds, unit by unit.
std::vector<Tensor> imported(const std::string& hf_dir) {
  auto groups = dist::local_process_groups();
  const config::Config cfg = config::load_config_string(
      "", "test",
      {"data.source=synthetic", "model.init_from=" + hf_dir, "checkpoint.resume=none", "train.seq_len=32",
       "logging.metrics=false", "run.dir=" + hf_dir + "_run"});
  train::Trainer t(cfg, groups);
  std::vector<Tensor> out;
  for (int u = 0; u < t.engine().num_units(); ++u) out.push_back(t.engine().master(u).clone());
  return out;
}

TEST(Export, Float32RoundTripsBitExactThroughInitFrom) {
  const std::string out = fresh("f32"), trained = trained_run();
  const Result r = run("export --checkpoint " + trained + "/checkpoints --output " + out + " --dtype float32",
                       out + ".log");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step_3"), std::string::npos) << "a checkpoint directory exports its newest: " << r.out;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  const ckpt::CheckpointReader ck(trained + "/checkpoints/step_3");
  const auto got = imported(out);
  for (size_t u = 0; u < got.size(); ++u) {
    Tensor want = Tensor::empty({got[u].numel()}, DType::F32);
    ck.read(int(u), "master", 0, want);
    EXPECT_TRUE(test::same_bits(got[u], want)) << "unit " << u;
  }
  // The same model evaluates to the same loss from the checkpoint and from the export.
  const Result a = run("eval" + kShape + " --set run.dir=" + trained, out + "_eval_a.log");
  const Result b = run("eval" + kShape + " --set checkpoint.resume=none --set model.init_from=" + out +
                           " --set run.dir=" + out + "_eval_run",
                       out + "_eval_b.log");
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(a.out.find("resumed from"), std::string::npos) << a.out;
  EXPECT_EQ(a.out.substr(a.out.rfind("eval_loss")), b.out.substr(b.out.rfind("eval_loss")));
}

TEST(Export, Bfloat16HoldsTheRoundedWeightsInSeveralShards) {
  const std::string out = fresh("bf16"), trained = trained_run();
  const std::string step = trained + "/checkpoints/step_3";
  const Result r = run("export --checkpoint " + step + " --output " + out + " --max-shard-size 300KB", out + ".log");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  const ckpt::CheckpointReader ck(step);
  const auto got = imported(out);
  for (size_t u = 0; u < got.size(); ++u) {
    Tensor want = Tensor::empty({got[u].numel()}, DType::F32);
    ck.read(int(u), "master", 0, want);
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float rounded = bf16_to_float(float_to_bf16(want.data<float>()[i]));
      ASSERT_EQ(got[u].data<float>()[i], rounded) << "unit " << u << " element " << i;
    }
  }
}

TEST(Export, BadInputExitsWithOneMessage) {
  const std::string out = fresh("bad"), trained = trained_run();
  Result r = run("export --checkpoint " + trained + "/checkpoints", out + ".log");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--output"), std::string::npos) << r.out;
  r = run("export --checkpoint " + out + "/nowhere --output " + out, out + ".log");
  EXPECT_EQ(r.code, 2);  // the command line's: nothing to read (issue 31)
  EXPECT_NE(r.out.find(out + "/nowhere"), std::string::npos) << r.out;
  fs::create_directories(out + "/full");
  std::ofstream(out + "/full/keep.txt") << "mine";
  r = run("export --checkpoint " + trained + "/checkpoints --output " + out + "/full", out + ".log");
  EXPECT_EQ(r.code, 2);  // --overwrite replaces it
  EXPECT_NE(r.out.find(out + "/full"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out + "/full/keep.txt"));
  // A corrupt checkpoint is refused by its CRC, not exported.
  fs::create_directories(out + "/ck");
  fs::copy(trained + "/checkpoints/step_3", out + "/ck/step_3");
  {
    std::fstream f(out + "/ck/step_3/rank_00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  r = run("export --checkpoint " + out + "/ck/step_3 --output " + out + "/x", out + ".log");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("CRC-32"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out + "/x"));
}

// A Mixtral trained with routing biases (model/router_bias.h) still exports, but the folder
// cannot hold them: one warning names the key and the largest |bias|, and says that
// transformers routes without them.
TEST(Export, RoutingBiasesWarnOnceThatTransformersRoutesWithoutThem) {
  const std::string d = fresh("bias_run"), out = fresh("bias");
  Result r = run("train" + kShape +
                     " --set model.num_experts=4 --set model.experts_per_token=2"
                     " --set model.router_bias_update_rate=0.01 --set train.max_steps=2 --set run.dir=" + d,
                 d + ".log");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("export --checkpoint " + d + "/checkpoints --output " + out, out + ".log");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  const size_t at = r.out.find("model.router_bias_update_rate; largest |bias| 0.0");
  EXPECT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("model.router_bias_update_rate", at + 1), std::string::npos) << "warned twice: " << r.out;
  EXPECT_NE(r.out.find("transformers will route without them"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fsdp
