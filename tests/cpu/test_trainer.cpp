// The single-process training loop: the loss falls, accumulation equals a bigger batch,
// runs are bit-reproducible, and a step allocates nothing on the heap after the first.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <cstdlib>
#include <new>

#include <cstring>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/data/synthetic.h"
#include "fsdp/obs/device_peak.h"
#include "fsdp/train/trainer.h"
#include "test_util.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

// The cpu test binary's allocation counter (included here and nowhere else in it).
#define FSDP_DEFINE_ALLOCATION_COUNTER
#include "../common/count_allocations.h"

namespace fsdp {
namespace {

// Single-process runs: one rank, no MPI.
struct LocalTrainer {
  explicit LocalTrainer(const config::Config& cfg) : groups(dist::local_process_groups()), trainer(cfg, groups) {}
  train::Trainer* operator->() { return &trainer; }
  dist::ProcessGroups groups;
  train::Trainer trainer;
};

config::Config small_config(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny",       "model.num_layers=2",  "train.seq_len=32",
                                "train.micro_batch_size=4", "train.max_steps=30",  "optim.lr=3e-3",
                                "optim.warmup_steps=5",     "optim.min_lr=3e-4",   "logging.metrics=false",
                                "run.dir=/tmp/fsdp_test_trainer"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

TEST(Trainer, LossFallsOnSyntheticData) {
  LocalTrainer t(small_config({"train.max_steps=60", "train.seq_len=64", "train.micro_batch_size=8"}));
  std::vector<double> losses;
  for (int i = 0; i < 60; ++i) losses.push_back(t->train_step().loss);
  // An untrained model predicts ~uniformly: ln(1024) = 6.93 nats.
  EXPECT_NEAR(losses.front(), std::log(1024.0), 0.1);
  // 60 steps of 512 tokens learn much of the Markov chain's structure (this run reaches
  // ~3.5 nats); the 2-nat margin leaves room for noise but not for a broken backward.
  EXPECT_LT(losses.back(), losses.front() - 2.0) << "first " << losses.front() << " last " << losses.back();
  EXPECT_GT(losses.back(), data::SyntheticSource::entropy_rate() - 0.05);  // nothing beats the floor
}

TEST(Trainer, RunsAreBitReproducible) {
  LocalTrainer a(small_config()), b(small_config());
  for (int i = 0; i < 5; ++i) {
    const auto ma = a->train_step(), mb = b->train_step();
    ASSERT_EQ(ma.loss, mb.loss) << "step " << i + 1;
    ASSERT_EQ(ma.grad_norm, mb.grad_norm) << "step " << i + 1;
  }
  for (int u = 0; u < a->engine().num_units(); ++u) {
    const Tensor pa = a->engine().master(u), pb = b->engine().master(u);
    ASSERT_EQ(std::memcmp(pa.data_ptr(), pb.data_ptr(), pa.nbytes()), 0) << "unit " << u;
  }
}

TEST(Trainer, GradientAccumulationEqualsOneBigMicroBatch) {
  // 2 micro-batches of 4 vs one of 8 over the same samples: the same step up to float
  // summation order (GEMM accumulation splits differently), i.e. ~1e-6 relative.
  LocalTrainer accum(small_config({"train.micro_batch_size=4", "train.grad_accum_steps=2"}));
  LocalTrainer big(small_config({"train.micro_batch_size=8", "train.grad_accum_steps=1"}));
  for (int i = 0; i < 5; ++i) {
    const auto ma = accum->train_step(), mb = big->train_step();
    EXPECT_NEAR(ma.loss, mb.loss, 1e-5 * mb.loss) << "step " << i + 1;
    EXPECT_NEAR(ma.grad_norm, mb.grad_norm, 1e-4 * mb.grad_norm) << "step " << i + 1;
  }
}

TEST(Trainer, NoHeapAllocationInsideAStepAfterTheFirst) {
  LocalTrainer t(small_config({"train.grad_accum_steps=2", "optim.weight_decay=0.1"}));
  t->train_step();  // the first step may size scratch buffers
  t->train_step();
  const size_t tensor_allocs = allocator_for(Device::cpu()).stats().num_allocs;
  const uint64_t before = test::heap_allocations();
  t->train_step();
  t->train_step();
  EXPECT_EQ(test::heap_allocations() - before, 0u) << "operator new called inside train_step";
  EXPECT_EQ(allocator_for(Device::cpu()).stats().num_allocs, tensor_allocs) << "tensor allocated inside train_step";
}

TEST(Trainer, EvaluateIsDeterministicAndDoesNotTrain) {
  LocalTrainer t(small_config());
  const double e1 = t->evaluate(2);
  const double e2 = t->evaluate(2);
  EXPECT_EQ(e1, e2);
  EXPECT_NEAR(e1, std::log(1024.0), 0.1);
  EXPECT_EQ(t->step(), 0);
}

// A context shorter than train.seq_len, and where a run may compute: config errors (exit 2)
// naming the key where it was set, found when the config loads or, for what depends on the
// machine (a visible GPU), when the run starts.
TEST(Trainer, SeqLenLongerThanModelContextIsRefused) {
  test::expect_error([&] { small_config({"model.max_seq_len=16"}); },
                     {"--set model.max_seq_len=16: key 'model.max_seq_len': train.seq_len 32 exceeds the model's "
                      "max_seq_len 16"});
}

TEST(Trainer, DeviceAndDtypeChoicesAreCheckedAtStart) {
  dist::WorldInfo w;
  w.hostname = "node7";
  EXPECT_EQ(train::resolve_device(small_config({"train.device=cpu"}), w), Device::cpu());
  // auto never picks the CUDA emulator, and without a visible GPU it is the CPU.
#if defined(FSDP_WITH_CUDA)
  const bool gpu = cuda::real_gpu_visible();
#else
  const bool gpu = false;
#endif
  EXPECT_EQ(train::resolve_device(small_config(), w).is_cuda(), gpu);
  test::expect_error([&] { train::resolve_device(small_config({"train.dtype=bfloat16", "train.device=cpu"}), w); },
                     {"--set train.device=cpu: key 'train.device' is cpu, but train.dtype bfloat16 needs a GPU"});
  test::expect_error([&] { LocalTrainer t(small_config({"train.device=cpu", "train.dtype=float16"})); },
                     {"--set train.dtype=float16: key 'train.dtype' is float16, which needs train.device cuda"});
  if (!gpu) {
    test::expect_error([&] { train::resolve_device(small_config({"train.dtype=bfloat16"}), w); },
                       {"--set train.dtype=bfloat16: key 'train.dtype' is bfloat16, which needs train.device cuda"});
  }
#if defined(FSDP_WITH_CUDA)
  if (cuda::device_count() == 0)
    test::expect_error([&] { train::resolve_device(small_config({"train.device=cuda"}), w); },
                       {"--set train.device=cuda: key 'train.device' is cuda but rank 0 on node7 sees no CUDA device"});
#else
  test::expect_error([&] { train::resolve_device(small_config({"train.device=cuda"}), w); },
                     {"--set train.device=cuda: key 'train.device' is cuda but this fsdp_train was built without the "
                      "CUDA backend"});
#endif
}

// MFU's denominator: datasheet dense bf16 peaks by name, the more specific name first;
// FSDP_PEAK_TFLOPS overrides; an unknown GPU gets none (the log then shows FLOP/s only).
TEST(DevicePeak, KnownGpusByNameAndTheOverride) {
  unsetenv("FSDP_PEAK_TFLOPS");
  EXPECT_EQ(obs::peak_bf16_flops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(obs::peak_bf16_flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(obs::peak_bf16_flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(obs::peak_bf16_flops("NVIDIA H200"), 989e12);
  EXPECT_FALSE(obs::peak_bf16_flops("fsdp_emu CPU emulator").has_value());
  setenv("FSDP_PEAK_TFLOPS", "500", 1);
  EXPECT_EQ(obs::peak_bf16_flops("NVIDIA H100 80GB HBM3"), 500e12);
  setenv("FSDP_PEAK_TFLOPS", "fast", 1);
  test::expect_error([] { obs::peak_bf16_flops("x"); }, {"FSDP_PEAK_TFLOPS must be a positive number", "'fast'"});
  unsetenv("FSDP_PEAK_TFLOPS");
}

TEST(Trainer, InitFromHuggingFaceFolderLoadsItsWeights) {
  const std::string dir = test::source_path("tests/golden/llama_gqa_tiny");
  LocalTrainer t(small_config({"model.init_from=" + dir, "train.seq_len=13", "train.micro_batch_size=2"}));
  EXPECT_EQ(t->model().config().vocab_size, 96);
  EXPECT_EQ(t->model().config().num_kv_heads, 2);
  // The embedding's first element equals the file's.
  const ckpt::SafetensorsFolder folder(dir);
  EXPECT_EQ(float(t->engine().master(0).get_flat(0)), ckpt::read_as_f32(folder.entry("model.embed_tokens.weight"))[0]);
  EXPECT_TRUE(std::isfinite(t->train_step().loss));
}

TEST(Trainer, InitFromRefusesContradictingShapeOverride) {
  const std::string dir = test::source_path("tests/golden/llama_gqa_tiny");
  try {
    LocalTrainer t(small_config({"model.init_from=" + dir, "model.hidden_size=64", "train.seq_len=13"}));
    FAIL() << "expected an error";
  } catch (const config::ConfigError& e) {  // exit 2, at the key's --set
    EXPECT_NE(std::string(e.what()).find("--set model.hidden_size=64: key 'model.hidden_size' = 64 contradicts"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdp

namespace fsdp {
namespace {

TEST(Trainer, ShardsFromATokenizerOfAnotherVocabularyAreRefused) {
  // prepare's manifest records the tokenizer's vocabulary; a model with another one would
  // train on meaningless ids, so the run stops before any work naming both sizes.
  const auto dir = std::filesystem::temp_directory_path() / "fsdp_vocab_mismatch";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "manifest.json") << R"({"format": "megatron-mmap-v1", "vocab_size": 32000})";
  try {
    LocalTrainer t(small_config({"data.source=shards", "data.path=" + dir.string()}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("vocab_size 32000 differs from model.vocab_size 1024"), std::string::npos) << msg;
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
