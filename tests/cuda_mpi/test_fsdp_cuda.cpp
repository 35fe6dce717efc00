// The trainer and the FSDP engine on CUDA (train.device: cuda), under mpiexec with 1, 2 and
// 4 ranks: the shards, gathered parameters and gradients live on each rank's GPU and the
// engine's collectives are the NCCL communicator's (in the emulation build: the CPU
// emulator and the NCCL stand-in over MPI; on a GPU machine: the same tests on the
// devices). Three references nobody tuned to these kernels:
//   * the CPU trainer (float32): the CUDA kernels compute the same math in other orders;
//   * one CUDA process over the same global batch (FSDP equivalence, every strategy, as
//     tests/mpi/test_fsdp.cpp does on the CPU), also with bf16 compute;
//   * the uninterrupted run (resume from a checkpoint is bit-exact on the device, for
//     float32, bfloat16 and float16 with its loss-scale state).
//
// Tolerances:
//   1e-5 per-step loss, 5e-5 final parameters (norm-wise): N ranks vs one process in
//        float32, the CPU tests' bounds and reasons (reduce-scatter sums in another order).
//   1e-4 per-step loss, 2e-4 parameters: CUDA vs CPU trainer in float32 over 6 steps. Each
//        kernel is within ~1e-6 of the CPU op (tests/cuda), and Adam's first steps
//        amplify a relative gradient change up to lr / |update| for nearly-cancelled
//        elements; measured: see the test's printout. A wrong layout or dtype path is O(1).
//   2e-2 per-step loss: bf16 compute over N ranks vs one bf16 process: every gathered
//        parameter, activation and gradient rounds at 2^-9, and the ranks' reduction
//        order differs from one process's accumulation (measured: see the printout).
//   bits: resume vs uninterrupted run on the same ranks and strategy.
// float16 runs are checked for what loss scaling must do (skip, halve, leave the
// parameters alone, train on), not against another dtype's curve.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/distributed_train_checks.h"
#include "../common/masked_corpus.h"
#include "cuda_mpi_test_env.h"
#if defined(FSDP_CUDA_EMULATION)
#include <cuda_runtime.h>  // the emulator's fsdpEmuHostBlockingCalls
#endif
#include "fsdp/core/allocator.h"
#include "fsdp/core/cuda.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 6;

// Odd shapes (vocab 97, hidden 36 = 3 heads of 12, 1 kv head, intermediate 50): no unit
// divides by 2, 3 or 4 ranks, so every shard pads; small enough for the emulator.
config::Config tiny(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny",          "model.num_layers=2",   "model.vocab_size=97",
                                "model.hidden_size=36",       "model.num_heads=3",    "model.num_kv_heads=1",
                                "model.intermediate_size=50", "train.seq_len=16",     "train.micro_batch_size=2",
                                "optim.lr=3e-3",              "optim.warmup_steps=2", "train.max_steps=20",
                                "logging.metrics=false",      "checkpoint.resume=none", "checkpoint.keep_last=10",
                                "train.device=cuda"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

class CudaTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
  }
};

struct Curve {
  std::vector<double> losses;
  std::vector<Tensor> params;  // every unit gathered in full, on the host
};

void gather_params(train::Trainer& t, Curve& c) {
  for (int u = 0; u < t.engine().num_units(); ++u) c.params.push_back(t.engine().gather_full(u).to(Device::cpu()));
}

Curve run(const config::Config& cfg, dist::ProcessGroups& groups, int steps = kSteps) {
  train::Trainer t(cfg, groups);
  EXPECT_EQ(t.device().is_cuda(), cfg.train.device == "cuda");
  Curve c;
  for (int i = 0; i < steps; ++i) c.losses.push_back(t.train_step().loss);
  gather_params(t, c);
  return c;
}

struct Worst {
  double loss = 0, params = 0;
};

Worst compare(const Curve& got, const Curve& want, double loss_tol, double param_tol, const std::string& what) {
  Worst w;
  EXPECT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < std::min(got.losses.size(), want.losses.size()); ++i) {
    const double e = std::abs(got.losses[i] - want.losses[i]) / want.losses[i];
    w.loss = std::max(w.loss, e);
    EXPECT_LT(e, loss_tol) << what << " step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
  }
  for (size_t u = 0; u < want.params.size() && param_tol > 0; ++u) {
    const double e = test::rel_norm_error(got.params[u], want.params[u]);
    w.params = std::max(w.params, e);
    EXPECT_LT(e, param_tol) << what << " unit " << u;
  }
  return w;
}

bool rank0() { return test::world_groups().world->rank() == 0; }

// One-process groups (no MPI, no NCCL) whose trainer takes this rank's GPU.
dist::ProcessGroups single_process_groups() {
  auto local = dist::local_process_groups();
  local.world_info.local_rank = test::world_groups().world_info.local_rank;
  return local;
}

// One process on the GPU over the same global batch: the world's micro-batches become
// accumulation steps. Rank 0 alone computes it and compares (the emulator is slow, and
// rank 0 holds the gathered parameters like every rank); the others return nothing.
Curve one_process(const std::vector<std::string>& extra, int accum) {
  if (!rank0()) return {};
  auto local = single_process_groups();
  std::vector<std::string> o = extra;
  o.push_back("train.grad_accum_steps=" + std::to_string(accum * test::world_groups().world->size()));
  o.push_back("fsdp.sharding_strategy=NO_SHARD");
  return run(tiny(o), local);
}

void expect_equivalent(const std::string& strategy, const std::vector<std::string>& extra, int accum = 1) {
  dist::ProcessGroups& world = test::world_groups();
  std::vector<std::string> o = extra;
  o.push_back("fsdp.sharding_strategy=" + strategy);
  o.push_back("train.grad_accum_steps=" + std::to_string(accum));
  const config::Config cfg = tiny(o);
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  const Curve got = run(cfg, groups);
  const Curve want = one_process(extra, accum);
  if (!rank0()) return;
  const Worst w = compare(got, want, 1e-5, 5e-5, strategy);
  std::printf("CUDA %s over %d rank(s) vs one CUDA process: loss %.1e, params %.1e\n", strategy.c_str(),
                world.world->size(), w.loss, w.params);
}

TEST_F(CudaTrainer, Float32MatchesTheCpuTrainer) {
  if (test::world_groups().world->size() != 1) GTEST_SKIP() << "single-process comparison: the np1 run does it";
  auto local = dist::local_process_groups();
  const Curve gpu = run(tiny(), local);
  const Curve cpu = run(tiny({"train.device=cpu"}), local);
  const Worst w = compare(gpu, cpu, 1e-4, 2e-4, "CUDA vs CPU trainer");
  std::printf("CUDA vs CPU trainer, float32, %d steps: loss %.1e, params %.1e\n", kSteps, w.loss, w.params);
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());  // it trains
}

// Packed SFT examples (data.packing, Note [Document masking] in fsdp/ops/attention.h): the
// CUDA trainer stages each micro-batch's document starts in pinned memory beside the ids and
// uploads them; its steps equal the CPU trainer's, as the synthetic data's do.
TEST_F(CudaTrainer, PackedExamplesMatchTheCpuTrainer) {
  if (test::world_groups().world->size() != 1) GTEST_SKIP() << "single-process comparison: the np1 run does it";
  auto local = dist::local_process_groups();
  const std::string data = (fs::temp_directory_path() / "fsdp_cuda_packed_data").string();
  test::write_masked_corpus(data, 48, 12, 97, 5);
  const std::vector<std::string> packed = {"data.source=shards", "data.path=" + data, "data.packing=true",
                                           "train.grad_accum_steps=2", "train.eval_every=0"};
  std::vector<std::string> on_cpu = packed;
  on_cpu.push_back("train.device=cpu");
  const Curve gpu = run(tiny(packed), local, 3);
  const Curve cpu = run(tiny(on_cpu), local, 3);
  const Worst w = compare(gpu, cpu, 1e-4, 2e-4, "CUDA vs CPU trainer, packed examples");
  std::printf("CUDA vs CPU trainer, packed examples, 3 steps: loss %.1e, params %.1e\n", w.loss, w.params);
}

// train.tf32 reaches the GEMMs: the first step's loss moves by TF32's rounding (measurably,
// but within 1e-3 relative), and a trainer without it turns it off again.
TEST_F(CudaTrainer, Tf32KeyReachesTheGemms) {
  auto local = single_process_groups();
  const double f32 = train::Trainer(tiny(), local).train_step().loss;
  EXPECT_FALSE(cuda::tf32());
  double tf32 = 0;
  {
    train::Trainer t(tiny({"train.tf32=true"}), local);
    EXPECT_TRUE(cuda::tf32());
    tf32 = t.train_step().loss;
  }
  EXPECT_NE(tf32, f32);
  EXPECT_LT(std::abs(tf32 - f32) / f32, 1e-3);
  train::Trainer off(tiny(), local);
  EXPECT_FALSE(cuda::tf32());
}

// The host waits for the device a fixed number of times per step, however many
// micro-batches it accumulates: the losses of all of them come back in one read-back
// (the emulator counts every call that makes the host wait).
TEST_F(CudaTrainer, HostWaitsPerStepDoNotGrowWithMicroBatches) {
#if !defined(FSDP_CUDA_EMULATION)
  GTEST_SKIP() << "counts the emulator's host waits";
#else
  auto local = single_process_groups();
  auto waits = [&](int accum) {
    train::Trainer t(tiny({"train.grad_accum_steps=" + std::to_string(accum)}), local);
    t.train_step();  // the first step allocates and probes
    const unsigned long long before = fsdpEmuHostBlockingCalls();
    t.train_step();
    return fsdpEmuHostBlockingCalls() - before;
  };
  const unsigned long long one = waits(1), four = waits(4);
  EXPECT_EQ(four, one) << "host waits grow with the micro-batches of a step";
  EXPECT_LE(one, 6u);  // three read-backs (losses, local sum of squares, all-reduced norm), each a copy + a sync
  if (rank0()) std::printf("host waits per CUDA training step: %llu (1 and 4 micro-batches)\n", one);
#endif
}

TEST_F(CudaTrainer, FullShardEqualsOneProcess) { expect_equivalent("FULL_SHARD", {}); }
TEST_F(CudaTrainer, ShardGradOpEqualsOneProcess) { expect_equivalent("SHARD_GRAD_OP", {}); }
TEST_F(CudaTrainer, NoShardEqualsOneProcess) { expect_equivalent("NO_SHARD", {}); }
TEST_F(CudaTrainer, HybridShardEqualsOneProcess) {
  const int n = test::world_groups().world->size();
  expect_equivalent("HYBRID_SHARD", {"fsdp.shard_group_size=" + std::to_string(n >= 4 ? 2 : n)});
}
TEST_F(CudaTrainer, FullShardWithAccumulationAndPrefetchOffEqualsOneProcess) {
  expect_equivalent("FULL_SHARD", {"fsdp.prefetch_limit=0"}, /*accum=*/2);
}

TEST_F(CudaTrainer, Bf16ComputeOverRanksStaysNearOneBf16Process) {
  dist::ProcessGroups& world = test::world_groups();
  const std::vector<std::string> bf16 = {"train.dtype=bfloat16", "fsdp.param_dtype=bfloat16",
                                         "fsdp.reduce_dtype=bfloat16"};
  std::vector<std::string> o = bf16;
  o.push_back("fsdp.sharding_strategy=FULL_SHARD");
  auto groups = dist::split_process_groups(world, 0);
  const Curve got = run(tiny(o), groups);
  const Curve want = one_process(bf16, 1);
  EXPECT_LT(got.losses.back(), got.losses.front());
  if (!rank0()) return;
  const Worst w = compare(got, want, 2e-2, 0, "bf16 FULL_SHARD");
  std::printf("CUDA bf16 FULL_SHARD over %d rank(s) vs one bf16 process: loss %.1e\n", world.world->size(), w.loss);
}

// float16 with dynamic loss scaling: a first scale far too large for float16 (2^22 times
// a logit gradient of up to 1/32 overflows 65504) makes the first steps' gradients inf;
// those steps are skipped (parameters untouched, scale halved each time, every rank
// alike, since all see the same all-reduced norm), then training proceeds and the loss
// falls.
TEST_F(CudaTrainer, Fp16SkipsOverflowingStepsHalvingTheScaleThenTrains) {
  dist::ProcessGroups& world = test::world_groups();
  const config::Config cfg = tiny({"train.dtype=float16", "fsdp.param_dtype=float16", "fsdp.reduce_dtype=float16",
                                   "train.fp16_init_scale=4194304", "train.fp16_growth_interval=1000"});
  auto groups = dist::split_process_groups(world, 0);
  train::Trainer t(cfg, groups);
  ASSERT_TRUE(t.loss_scaler().enabled());
  const Tensor before = t.engine().gather_full(0).to(Device::cpu());
  std::vector<obs::StepMetrics> steps;
  for (int i = 0; i < 10; ++i) steps.push_back(t.train_step());
  // The first step overflows; from then on each skipped step halves the scale the next
  // one runs with, and an applied step keeps it (growth is 1000 clean steps away). As
  // training sharpens the logits a later step may overflow again: that is the point.
  EXPECT_TRUE(steps[0].skipped) << "2^22 should overflow float16 gradients";
  int skipped = 0, prefix = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(steps[i].loss_scale.has_value());
    const double want = i == 0 ? 4194304.0 : *steps[i - 1].loss_scale * (steps[i - 1].skipped ? 0.5 : 1.0);
    EXPECT_EQ(*steps[i].loss_scale, want) << "step " << i + 1;
    skipped += steps[i].skipped;
    if (steps[i].skipped && size_t(prefix) == i) ++prefix;
  }
  EXPECT_EQ(t.loss_scaler().skipped_steps(), skipped);
  EXPECT_LE(skipped, 6);
  EXPECT_LT(steps.back().loss, steps[size_t(prefix)].loss);  // it trains once the scale fits
  // A skipped step leaves the parameters alone: rerun only the skipped prefix.
  train::Trainer again(cfg, groups);
  for (int i = 0; i < prefix; ++i) again.train_step();
  const Tensor after = again.engine().gather_full(0).to(Device::cpu());
  EXPECT_EQ(std::memcmp(after.data_ptr(), before.data_ptr(), before.nbytes()), 0);
  if (rank0())
    std::printf("CUDA fp16 over %d rank(s): %d of 10 steps skipped from scale 2^22 (%d at the start)\n",
                world.world->size(), skipped, prefix);
}

std::string shared_scratch(const std::string& name) {
  return test::shared_scratch(*test::world_groups().world, "fsdp_cuda_ckpt_" + name);
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Training 2K steps straight equals K steps, a save, a new trainer resuming, K more steps:
// losses and final parameters bit for bit (AdamW moments, the data position and, for
// float16, the loss scaler come back exactly).
void expect_bit_exact_resume(const std::string& name, const std::vector<std::string>& extra) {
  constexpr int K = 3;
  dist::ProcessGroups& world = test::world_groups();
  const std::string dir = shared_scratch(name);
  std::vector<std::string> o = extra;
  o.push_back("run.dir=" + dir);
  const config::Config cfg = tiny(o);
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  const Curve want = run(cfg, groups, 2 * K);

  std::vector<std::string> first = o;
  first.push_back("run.dir=" + dir + "/resumed");
  Curve got;
  {
    train::Trainer t(tiny(first), groups);
    for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  std::vector<std::string> second = first;
  second.push_back("checkpoint.resume=auto");
  train::Trainer t(tiny(second), groups);
  EXPECT_EQ(t.step(), K);
  EXPECT_NE(t.resumed_from().find("step_"), std::string::npos);
  for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
  gather_params(t, got);
  EXPECT_TRUE(same_bits(got.losses, want.losses)) << name;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_EQ(got.losses[i], want.losses[i]) << name << " step " << i + 1;
  for (size_t u = 0; u < want.params.size(); ++u)
    EXPECT_EQ(std::memcmp(got.params[u].data_ptr(), want.params[u].data_ptr(), want.params[u].nbytes()), 0)
        << name << " unit " << u;
}

TEST_F(CudaTrainer, ResumeIsBitExactFullShardFloat32) { expect_bit_exact_resume("f32", {}); }

// A mixture of experts on the device: every strategy as for Llama is the CPU tests' job;
// here the CUDA MoE path once through FSDP, against one CUDA process, and resumed bit-exact.
const std::vector<std::string> kMoe = {"model.num_experts=4", "model.experts_per_token=2",
                                       "model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001"};
TEST_F(CudaTrainer, MixtureOfExpertsFullShardEqualsOneProcess) { expect_equivalent("FULL_SHARD", kMoe); }

// Activation checkpointing on the device, over the world's ranks (FULL_SHARD), bf16: the
// recomputed forward gives the same bits, so the losses and parameters are identical, for
// full and selective, and with offloading, whose copies run on a copy stream that the
// emulator runs as late as its events allow (Note [Deferred copies]): a missing event would
// show here as a different loss.
TEST_F(CudaTrainer, ActivationCheckpointingIsBitIdenticalBf16) {
  dist::ProcessGroups& world = test::world_groups();
  auto groups = dist::split_process_groups(world, 0);
  using Modes = std::vector<std::vector<std::string>>;
  // Four blocks, so that offloading with horizon 1 (three slots) reuses a slot.
  const Modes llama = {{"train.activation_checkpointing=selective", "train.activation_checkpointing_every=2"},
                       {"train.activation_checkpointing=full", "train.activation_offload=true",
                        "train.activation_offload_horizon=1"}};
  const Modes moe = {{"train.activation_checkpointing=full"},
                     {"train.activation_checkpointing=selective", "train.activation_offload=true",
                      "train.activation_offload_horizon=1"}};
  for (const auto& [model, modes] : {std::pair{std::vector<std::string>{}, llama}, std::pair{kMoe, moe}}) {
    std::vector<std::string> o = model;
    for (const char* s : {"train.dtype=bfloat16", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16",
                          "model.num_layers=4"})
      o.push_back(s);
    const Curve want = run(tiny(o), groups, 2);
    for (const std::vector<std::string>& mode : modes) {
      std::vector<std::string> with = o;
      with.insert(with.end(), mode.begin(), mode.end());
      const Curve got = run(tiny(with), groups, 2);
      const std::string what = mode[0] + (mode.size() > 1 ? " " + mode[1] : "");
      EXPECT_EQ(got.losses, want.losses) << what;
      for (size_t u = 0; u < want.params.size(); ++u)
        EXPECT_EQ(std::memcmp(got.params[u].data_ptr(), want.params[u].data_ptr(), want.params[u].nbytes()), 0)
            << what << " unit " << u;
    }
  }
}

// The memory plan against the emulated GPU's allocator: its tensor peak over the trainer's
// construction and a step, within 1% (the CPU's test says why that is the bound).
TEST_F(CudaTrainer, MemoryPlanMatchesTheDeviceAllocator) {
  dist::ProcessGroups& world = test::world_groups();
  const std::vector<std::vector<std::string>> cases = {
      {"train.dtype=bfloat16", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"},
      {"train.dtype=bfloat16", "fsdp.param_dtype=float32", "train.activation_checkpointing=selective",
       "train.grad_accum_steps=2"},
      {"model.num_experts=4", "model.experts_per_token=2", "fsdp.sharding_strategy=SHARD_GRAD_OP",
       "train.activation_checkpointing=full", "train.activation_offload=true"},
  };
  for (const auto& settings : cases) {
    const config::Config cfg = tiny(settings);
    auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
    const Device dev = Device::cuda(test::world_groups().world_info.local_rank);
    Allocator& mem = allocator_for(dev);
    const size_t before = mem.stats().current_bytes;
    mem.reset_peak();
    train::Trainer t(cfg, groups);
    t.train_step();
    const double measured = double(mem.stats().peak_bytes - before);
    const double planned = t.memory_plan().tensor_peak;
    EXPECT_NEAR(planned / measured, 1.0, 0.01) << settings.back();
    if (rank0())
      std::printf("[memory plan on the device] %s ...: plan %.0f B, measured %.0f B (%+.3f%%)\n", settings.back().c_str(),
                  planned, measured, 100.0 * (planned / measured - 1.0));
  }
}
TEST_F(CudaTrainer, MixtureOfExpertsResumeIsBitExactBf16) {
  std::vector<std::string> o = kMoe;
  for (const char* s : {"train.dtype=bfloat16", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"})
    o.push_back(s);
  expect_bit_exact_resume("moe_bf16", o);
}
TEST_F(CudaTrainer, ResumeIsBitExactHybridBf16Async) {
  const int n = test::world_groups().world->size();
  expect_bit_exact_resume("bf16", {"train.dtype=bfloat16", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16",
                                   "fsdp.sharding_strategy=HYBRID_SHARD",
                                   "fsdp.shard_group_size=" + std::to_string(n >= 4 ? 2 : n), "checkpoint.async=true",
                                   "train.grad_accum_steps=2"});
}

// Checkpoints are the same files whatever the device: a CPU run's checkpoint continues on
// the GPU along the CPU run's curve (within the CPU-vs-CUDA float32 bound above).
TEST_F(CudaTrainer, ACheckpointSavedOnTheCpuResumesOnTheGpu) {
  constexpr int K = 3;
  dist::ProcessGroups& world = test::world_groups();
  const std::string dir = shared_scratch("cpu_to_gpu");
  auto groups = dist::split_process_groups(world, 0);
  const std::vector<std::string> cpu = {"train.device=cpu", "run.dir=" + dir};
  const Curve want = run(tiny(cpu), groups, 2 * K);
  Curve got;
  {
    train::Trainer t(tiny({"train.device=cpu", "run.dir=" + dir + "/moved"}), groups);
    for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
    t.save_checkpoint();
  }
  train::Trainer t(tiny({"run.dir=" + dir + "/moved", "checkpoint.resume=auto"}), groups);
  ASSERT_TRUE(t.device().is_cuda());
  EXPECT_EQ(t.step(), K);
  for (int i = 0; i < K; ++i) got.losses.push_back(t.train_step().loss);
  gather_params(t, got);
  compare(got, want, 1e-4, 2e-4, "CPU checkpoint resumed on the GPU");
}

TEST_F(CudaTrainer, ResumeIsBitExactFp16WithTheLossScalerState) {
  // Growth every 2 clean steps and a first scale that overflows once: the scale changes
  // on both sides of the save, so a resume that lost it would diverge.
  expect_bit_exact_resume("f16", {"train.dtype=float16", "fsdp.param_dtype=float16", "fsdp.reduce_dtype=float32",
                                  "train.fp16_init_scale=4194304", "train.fp16_growth_interval=2"});
}

}  // namespace
}  // namespace fsdp
