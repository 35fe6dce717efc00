// Checkpoints in one process: save and read back the exact bits, bit-exact resume (sync
// and async saves), pruning, and every kind of bad checkpoint or failed save giving one
// clear message while the previous checkpoint survives. Multi-rank resume and resharding
// are in tests/mpi/test_checkpoint.cpp and tests/integration/ckpt_*.sh.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/train/divergence.h"
#include "fsdp/train/trainer.h"
#include "../common/local_trainer.h"
#include "../common/masked_corpus.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

using test::ckpt_config;
using test::LocalTrainer;
using test::scratch;

// Every unit's master shard, flattened.
std::vector<float> all_params(train::Trainer& t) {
  std::vector<float> out;
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor& m = t.engine().master(u);
    out.insert(out.end(), m.data<float>(), m.data<float>() + m.numel());
  }
  return out;
}

std::vector<float> all_moments(train::Trainer& t) {
  std::vector<float> out;
  for (int u = 0; u < t.engine().num_units(); ++u) {
    for (const Tensor* m : {&t.engine().exp_avg(u), &t.engine().exp_avg_sq(u)})
      out.insert(out.end(), m->data<float>(), m->data<float>() + m->numel());
  }
  return out;
}

using test::error_message;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, SaveWritesManifestAndRankFileAndReadsBackExactBits) {
  const std::string dir = scratch("roundtrip");
  LocalTrainer t(ckpt_config(dir));
  for (int i = 0; i < 3; ++i) t->train_step();
  const ckpt::SaveStats s = t->save_checkpoint();
  EXPECT_EQ(s.path, dir + "/checkpoints/step_3");
  EXPECT_TRUE(fs::exists(s.path + "/manifest.json"));
  EXPECT_TRUE(fs::exists(s.path + "/rank_00000.safetensors"));
  EXPECT_FALSE(fs::exists(s.path + ".tmp"));
  const ckpt::CheckpointReader r(s.path);
  r.verify();
  EXPECT_EQ(r.manifest().state.step, 3);
  EXPECT_EQ(r.manifest().world_size, 1);
  EXPECT_EQ(r.manifest().model.hidden_size, 64);
  EXPECT_NE(r.manifest().config_yaml.find("hidden_size: 64"), std::string::npos);
  for (int u = 0; u < t->engine().num_units(); ++u) {
    for (auto kind : ckpt::kStateKinds) {
      const Tensor& want = kind == "master" ? t->engine().master(u)
                           : kind == "exp_avg" ? t->engine().exp_avg(u)
                                               : t->engine().exp_avg_sq(u);
      Tensor got = Tensor::empty({want.numel()}, DType::F32);
      r.read(u, kind, 0, got);
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), size_t(want.nbytes())), 0) << u << " " << kind;
    }
  }
  // A range read across the middle and past the end (padding reads as zero).
  const int64_t numel = r.manifest().units[1].numel;
  Tensor tail = Tensor::empty({10}, DType::F32);
  r.read(1, "master", numel - 4, tail);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tail.data<float>()[i], t->engine().master(1).data<float>()[numel - 4 + i]);
  for (int i = 4; i < 10; ++i) EXPECT_EQ(tail.data<float>()[i], 0.0f);
}

// Train 2K steps straight; train K, save, resume in a new trainer, train K more: the same
// losses, grad norms and final parameters and moments, bit for bit.
void expect_bit_exact_resume(const std::vector<std::string>& extra, const std::string& name) {
  const int K = 4;
  const std::string d1 = scratch(name + "_straight"), d2 = scratch(name + "_resumed");
  std::vector<double> straight, resumed;
  std::vector<float> p_straight, m_straight;
  {
    LocalTrainer t(ckpt_config(d1, extra));
    for (int i = 0; i < 2 * K; ++i) straight.push_back(t->train_step().loss);
    p_straight = all_params(t.trainer);
    m_straight = all_moments(t.trainer);
  }
  {
    LocalTrainer t(ckpt_config(d2, extra));
    for (int i = 0; i < K; ++i) resumed.push_back(t->train_step().loss);
    t->save_checkpoint();
    t->finish_checkpoint();
  }
  LocalTrainer t(ckpt_config(d2, extra));
  ASSERT_EQ(t->resumed_from(), d2 + "/checkpoints/step_4");
  ASSERT_EQ(t->step(), K);
  for (int i = 0; i < K; ++i) resumed.push_back(t->train_step().loss);
  for (int i = 0; i < 2 * K; ++i) EXPECT_EQ(straight[i], resumed[i]) << "step " << i + 1;
  EXPECT_TRUE(same_bits(all_params(t.trainer), p_straight));
  EXPECT_TRUE(same_bits(all_moments(t.trainer), m_straight));
}

TEST(Checkpoint, ResumeIsBitExact) { expect_bit_exact_resume({}, "exact"); }

TEST(Checkpoint, ResumeIsBitExactWithAsyncSaveAccumulationAndBf16Gathers) {
  expect_bit_exact_resume({"checkpoint.async=true", "train.grad_accum_steps=2", "fsdp.param_dtype=bfloat16"},
                          "exact_async");
}

TEST(Checkpoint, ResumeIsBitExactForAMixtureOfExperts) {
  expect_bit_exact_resume({"model.num_experts=4", "model.experts_per_token=2", "model.router_aux_loss_coef=0.02",
                           "model.router_z_loss_coef=0.001", "train.grad_accum_steps=2"},
                          "exact_moe");
}

TEST(Checkpoint, ResumeIsBitExactWithTiedEmbeddingsAndRopeScaling) {
  expect_bit_exact_resume({"model.tie_word_embeddings=true", "model.rope_scaling=linear",
                           "model.rope_scaling_factor=4", "train.grad_accum_steps=2"},
                          "exact_tied");
}

TEST(Checkpoint, ResumeIsBitExactOnTokenShards) {
  // The loader's shuffled position is restored too (a real corpus, not the synthetic chain).
  const std::string data = scratch("shards_data");
  {
    data::IndexedDatasetWriter w(data + "/train_000", 256);
    std::vector<int32_t> doc(40);
    for (int d = 0; d < 64; ++d) {
      for (int i = 0; i < 40; ++i) doc[size_t(i)] = (d * 7 + i * 13) % 250;
      w.add_document(doc.data(), int64_t(doc.size()));
    }
    w.finish();
  }
  expect_bit_exact_resume({"data.source=shards", "data.path=" + data}, "exact_shards");
}

TEST(Checkpoint, ResumeIsBitExactWithPackedExamples) {
  // SFT data packed best-fit, the examples kept apart by document masking: the resumed run
  // reads the same windows with the same document starts.
  const std::string data = scratch("packed_data");
  test::write_masked_corpus(data, 96, 17, 256, 3);
  expect_bit_exact_resume({"data.source=shards", "data.path=" + data, "data.packing=true", "train.grad_accum_steps=2"},
                          "exact_packed");
}

TEST(Checkpoint, RunSavesAtIntervalKeepsLastAndResumesAutomatically) {
  const std::string dir = scratch("interval");
  {
    LocalTrainer t(ckpt_config(dir, {"checkpoint.interval=2", "checkpoint.keep_last=2", "logging.metrics=true"}));
    EXPECT_EQ(t->run(), 0);
  }
  const auto kept = ckpt::list_checkpoints(dir + "/checkpoints");
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], dir + "/checkpoints/step_8");
  EXPECT_EQ(kept[1], dir + "/checkpoints/step_6");
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints"))
    EXPECT_TRUE(e.path().filename().string() == "step_8" || e.path().filename().string() == "step_6") << e.path();
  // A longer run on the same directory continues from step 8 and keeps one curve in metrics.jsonl.
  LocalTrainer t(ckpt_config(dir, {"train.max_steps=10", "logging.metrics=true"}));
  EXPECT_EQ(t->step(), 8);
  EXPECT_EQ(t->run(), 0);
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  int64_t expect = 1;
  while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int64_t>(), expect++);
  EXPECT_EQ(expect, 11);
}

TEST(Checkpoint, MetricsOfTheKilledRunAfterTheCheckpointAreDropped) {
  const std::string dir = scratch("metrics");
  {
    std::ofstream out(dir + "/metrics.jsonl");
    for (int s = 1; s <= 7; ++s) out << "{\"step\":" << s << ",\"loss\":1.0}\n";
  }
  obs::truncate_metrics_after(dir + "/metrics.jsonl", 4);
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int>(), ++n);
  EXPECT_EQ(n, 4);
}

// (checkpoint.resume: none over existing checkpoints: test_run_ownership.cpp.)
TEST(Checkpoint, StaleTmpIsNeverPicked) {
  const std::string dir = scratch("stale_tmp");
  {
    LocalTrainer t(ckpt_config(dir));
    t->train_step();
    t->save_checkpoint();
  }
  // A crashed save of a later step: a step_9.tmp with a manifest-less partial file.
  fs::create_directories(dir + "/checkpoints/step_9.tmp");
  std::ofstream(dir + "/checkpoints/step_9.tmp/rank_00000.safetensors") << "partial";
  LocalTrainer t(ckpt_config(dir));
  EXPECT_EQ(t->step(), 1);
  EXPECT_EQ(t->resumed_from(), dir + "/checkpoints/step_1");
  t->train_step();
  t->save_checkpoint();
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_9.tmp")) << "the next save clears crashed leftovers";
}

// Two checkpoints, step_2 and step_4; `damage` breaks step_4.
struct TwoCheckpoints {
  std::string dir;
  explicit TwoCheckpoints(const std::string& name) : dir(scratch(name)) {
    LocalTrainer t(ckpt_config(dir));
    t->train_step();
    t->train_step();
    t->save_checkpoint();
    t->train_step();
    t->train_step();
    t->save_checkpoint();
  }
  std::string newest() const { return dir + "/checkpoints/step_4"; }
  std::string rank_file() const { return newest() + "/rank_00000.safetensors"; }
  // auto skips the broken newest and resumes from step 2; naming it explicitly fails.
  void expect_skipped_and_refused(const std::string& what) const {
    {
      LocalTrainer t(ckpt_config(dir));
      EXPECT_EQ(t->step(), 2) << what;
    }
    const std::string msg = error_message([&] { LocalTrainer t(ckpt_config(dir, {"checkpoint.resume=" + newest()})); });
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
};

TEST(CheckpointBadInput, TruncatedShardIsSkippedOrRefused) {
  TwoCheckpoints c("truncated");
  fs::resize_file(c.rank_file(), fs::file_size(c.rank_file()) - 100);
  c.expect_skipped_and_refused("truncated");
}

TEST(CheckpointBadInput, ChecksumMismatchIsSkippedOrRefused) {
  TwoCheckpoints c("crc");
  {
    std::fstream f(c.rank_file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-17, std::ios::end);
    char b = 0;
    f.read(&b, 1);
    f.seekp(-17, std::ios::end);
    b = char(b ^ 0x10);
    f.write(&b, 1);
  }
  c.expect_skipped_and_refused("CRC-32");
}

TEST(CheckpointBadInput, MissingRankFileIsSkippedOrRefused) {
  TwoCheckpoints c("missing");
  fs::remove(c.rank_file());
  c.expect_skipped_and_refused("missing");
}

TEST(CheckpointBadInput, NewerFormatVersionIsSkippedOrRefused) {
  TwoCheckpoints c("version");
  const std::string path = c.newest() + "/manifest.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j["format_version"] = ckpt::kCheckpointFormatVersion + 1;
  std::ofstream(path) << j.dump();
  c.expect_skipped_and_refused("newer fsdp_train");
}

// A manifest whose files all pass their CRCs but whose fields are impossible (Note [Manifest
// schema]): the checkpoint is broken like a corrupt one, auto falls back to step_2, and
// naming it explicitly fails naming the field.
TEST(CheckpointBadInput, MalformedManifestIsSkippedOrRefused) {
  using nlohmann::json;
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["world_size"] = 0; }, "'world_size' must be in [1, 1048576], got 0"},
      {[](json& j) { j["world_size"] = 1000; }, "shard_group_size 1 differs from world_size 1000"},
      {[](json& j) { j["strategy"] = "FOO"; }, "strategy 'FOO' is not one of"},
      {[](json& j) { j["state"]["step"] = int64_t(1) << 62; }, "'step' must be in [0, 2147483647], got 4611686018427387904"},
      {[](json& j) { j["state"]["step"] = -1; }, "'step' must be in [0, 2147483647], got -1"},
      {[](json& j) { j["state"]["tokens_seen"] = -5; }, "'tokens_seen' must be in"},
      {[](json& j) { j["files"][0]["bytes"] = 1e30; }, "'bytes' must be an integer, got 1e+30"},
      {[](json& j) { j["files"][0]["name"] = "../../etc/passwd"; }, "'../../etc/passwd' is not a plain file name"},
      {[](json& j) { j["model"]["hidden_size"] = 64.5; }, "'hidden_size' must be an integer, got 64.5"},
      {[](json& j) { j["model"]["num_heads"] = 0; }, "'num_heads' must be in [1, 4096], got 0"},
      // Tensor parallelism's fields (manifest.h): only in version 2, within the world, tiling.
      {[](json& j) { j["tensor_parallel"] = 2; }, "'tensor_parallel' needs format_version 2, got 1"},
      {[](json& j) { j["format_version"] = 2, j["tensor_parallel"] = 2; }, "'tensor_parallel' must be in [1, 1], got 2"},
      {[](json& j) { j["units"][1]["pieces"][0]["tensor_rank"] = 1; },
       "a piece of tensor rank 1 in a checkpoint of tensor_parallel 1"},
      {[](json& j) { j["units"][1]["slots"] = json::array({{{"name", "x"}, {"shape", {3}}, {"offset", 0}, {"split", -1}}}); },
       "its slots hold 3 of its"},
      {[](json& j) { j["units"][1]["slots"] = json::array({{{"name", "x"}, {"shape", {3}}, {"offset", 0}, {"split", 1}}}); },
       "'split' must be in [-1, 0], got 1"},
  };
  TwoCheckpoints c("manifest_schema");
  const std::string path = c.newest() + "/manifest.json";
  const json original = json::parse(std::ifstream(path));
  for (const auto& [damage, what] : cases) {
    json j = original;
    damage(j);
    std::ofstream(path) << j.dump();
    c.expect_skipped_and_refused(what);
  }
}

TEST(CheckpointBadInput, DifferentModelShapeIsOneClearError) {
  TwoCheckpoints c("shape");
  const std::string msg =
      error_message([&] { LocalTrainer t(ckpt_config(c.dir, {"model.hidden_size=128", "model.intermediate_size=192"})); });
  EXPECT_NE(msg.find("hidden_size = 64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("different model"), std::string::npos) << msg;
}

TEST(CheckpointBadInput, DenseCheckpointIntoAMixtureOfExpertsIsOneClearError) {
  TwoCheckpoints c("dense_to_moe");
  const std::string msg =
      error_message([&] { LocalTrainer t(ckpt_config(c.dir, {"model.num_experts=4", "model.experts_per_token=2"})); });
  EXPECT_NE(msg.find("num_experts = 0, but the config asks for 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("different model"), std::string::npos) << msg;
}

TEST(CheckpointBadInput, UntiedCheckpointIntoATiedModelIsOneClearError) {
  TwoCheckpoints c("untied_to_tied");
  const std::string msg = error_message([&] { LocalTrainer t(ckpt_config(c.dir, {"model.tie_word_embeddings=true"})); });
  EXPECT_NE(msg.find("tie_word_embeddings = false, but the config asks for true"), std::string::npos) << msg;
  EXPECT_NE(msg.find("different model"), std::string::npos) << msg;
}

TEST(CheckpointBadInput, UnwritableDirectoryFailsTheSaveAndNamesIt) {
  const std::string dir = scratch("unwritable");
  std::ofstream(dir + "/file") << "x";  // a file where a directory should be (root ignores chmod)
  LocalTrainer t(ckpt_config(dir, {"checkpoint.dir=" + dir + "/file/ckpt"}));
  t->train_step();
  const std::string msg = error_message([&] { t->save_checkpoint(); });
  EXPECT_NE(msg.find(dir + "/file/ckpt"), std::string::npos) << msg;
}

TEST(CheckpointBadInput, FailedSaveCanLetTrainingGoOn) {
  const std::string dir = scratch("goes_on");
  std::ofstream(dir + "/file") << "x";
  LocalTrainer t(ckpt_config(dir, {"checkpoint.dir=" + dir + "/file/ckpt", "checkpoint.stop_on_error=false"}));
  t->train_step();
  EXPECT_NO_THROW(t->save_checkpoint());
  EXPECT_NO_THROW(t->train_step());
}

// A full disk, simulated with a file-size limit in a child process: the save fails with a
// message naming the file, the run exits 1, and the previous checkpoint is untouched and
// still resumable.
TEST(CheckpointBadInput, FullDiskDuringSaveKeepsThePreviousCheckpoint) {
  const std::string dir = scratch("full_disk");
  const std::string common = std::string(FSDP_TRAIN_BIN) + " train --config " FSDP_SOURCE_DIR "/configs/tiny.yaml" +
                             " --set data.source=synthetic --set model.num_layers=2 --set train.seq_len=16" +
                             " --set train.micro_batch_size=2 --set train.eval_every=0 --set run.dir=" + dir;
  ASSERT_EQ(std::system((common + " --set train.max_steps=2 > " + dir + "/ok.log 2>&1").c_str()), 0);
  const std::string good = dir + "/checkpoints/step_2";
  ASSERT_TRUE(fs::exists(good + "/manifest.json"));
  // 1 MiB files at most: the rank file (several MiB) cannot be written.
  const int rc = std::system(("bash -c 'ulimit -f 1024; exec " + common +
                              " --set train.max_steps=3 --set logging.metrics=false' > " + dir + "/full.log 2>&1")
                                 .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  std::ifstream in(dir + "/full.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("step_3.tmp/rank_00000.safetensors"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_3"));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_3.tmp")) << "a failed save cleans up after itself";
  const ckpt::CheckpointReader r(good);
  EXPECT_NO_THROW(r.verify());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A NaN among the saved weights of the newest checkpoint, with the manifest's CRC made to
// match: only the finiteness count of the verifying pass can tell.
TEST(CheckpointBadInput, NonFiniteWeightsAreSkippedOrRefused) {
  TwoCheckpoints c("nonfinite");
  std::string bytes = read_text(c.rank_file());
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const uint32_t nan_bits = 0x7fc00000u;
  std::memcpy(bytes.data() + 8 + header + 4 * 100, &nan_bits, 4);  // the 101st float of the data region
  std::ofstream(c.rank_file(), std::ios::binary | std::ios::trunc) << bytes;
  const std::string manifest = c.newest() + "/manifest.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(manifest));
  j["files"][0]["crc32"] = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
  std::ofstream(manifest) << j.dump();
  c.expect_skipped_and_refused("1 weights or optimizer moments are NaN or Inf: it was saved from a diverged run");
}

// ---- Divergence (train/divergence.h) ---------------------------------------------------------

TEST(CheckpointDivergence, NonFiniteWeightsAreNeverSaved) {
  const std::string dir = scratch("nan_weights");
  LocalTrainer t(ckpt_config(dir));
  t->train_step();
  t->engine().master(0).set_flat(3, std::nan(""));
  const std::string msg = error_message([&] { t->save_checkpoint(); });
  EXPECT_EQ(msg, "the weights are not finite after step 1 (its update overflowed)");
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_1"));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_1.tmp"));
}

TEST(CheckpointDivergence, TheCheckpointBehindANonFiniteLossIsMovedAsideAndTheOneBeforeIsNamed) {
  const std::string dir = scratch("set_aside");
  {
    LocalTrainer t(ckpt_config(dir));
    for (int s = 0; s < 3; ++s) {
      t->train_step();
      t->save_checkpoint();
    }
  }
  const std::string ckpts = dir + "/checkpoints";
  fs::create_directories(ckpts + "/step_3.diverged");  // an earlier run's: kept, the new one gets another name
  // A NaN loss at step 4 came from the weights after step 3.
  const std::string line = train::handle_divergence(train::Diverged("loss is nan at step 4", 4, 3), ckpts, true);
  EXPECT_EQ(line, "loss is nan at step 4: the run diverged; moved checkpoint aside (step_3.diverged-2: it holds the "
                  "weights that diverged, so resume skips it); the last good checkpoint is " +
                      ckpts + "/step_2 (step 2), where a rerun resumes: lower optim.lr, keep train.grad_clip on, or "
                              "check the data before it");
  EXPECT_FALSE(fs::exists(ckpts + "/step_3"));
  EXPECT_TRUE(fs::exists(ckpts + "/step_3.diverged-2/manifest.json"));
  LocalTrainer resumed(ckpt_config(dir));
  EXPECT_EQ(resumed->step(), 2);
}

// The finding, with fsdp_train itself: at lr 1e30 step 1's loss is finite but its
// update leaves weights of ~5e28 (finite), step_1 is saved, and step 2's loss is NaN. Before,
// every rerun resumed from step_1 and died at step 2 again; now the run exits 1 naming the
// step and the checkpoint it moved aside, and the rerun starts from step 0.
TEST(CheckpointDivergence, ADivergingRunDoesNotLeaveACheckpointToResumeInto) {
  const std::string dir = scratch("diverging_cli");
  const std::string cmd = std::string(FSDP_TRAIN_BIN) + " train --config " FSDP_SOURCE_DIR "/configs/tiny.yaml" +
                          " --set data.source=synthetic --set model.num_layers=2 --set train.seq_len=16" +
                          " --set train.micro_batch_size=2 --set train.eval_every=0 --set train.max_steps=5" +
                          " --set optim.lr=1e30 --set train.grad_clip=0 --set checkpoint.interval=1" +
                          " --set run.dir=" + dir;
  for (const char* run : {"first", "rerun"}) {
    SCOPED_TRACE(run);
    const std::string log = dir + "/" + run + ".log";
    const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 1);
    const std::string text = read_text(log);
    EXPECT_EQ(text.find("resumed from"), std::string::npos) << text;
    EXPECT_NE(text.find("loss is nan at step 2: the run diverged; moved checkpoint aside (step_1.diverged"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("no checkpoint in " + dir + "/checkpoints predates it, so a rerun starts from step 0"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("check `"), std::string::npos) << "no source location in the user's line: " << text;
  }
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_1"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_1.diverged"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_1.diverged-2"));
}

}  // namespace
}  // namespace fsdp
