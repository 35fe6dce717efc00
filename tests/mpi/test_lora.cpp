// LoRA and QLoRA under FSDP with 1, 2 and 4 ranks (issue 15), on the tiny model with a
// seeded base (LoRA on the base a full fine-tune with that seed starts from):
//   - every strategy equals one process over the same global batch (losses 1e-5 per step,
//     adapters 5e-5 norm-wise: test_fsdp.cpp's bounds and reasons), dense and NF4 bases, with
//     accumulation, and with lora.dropout 0.1: the masks follow the samples' global positions,
//     so the ranks drop exactly what the one process drops; a tied head reading the frozen
//     table, under selective and full checkpointing with offloading;
//   - frozen means frozen: after the steps every rank's frozen shard holds the bytes it was
//     loaded with, and the engine holds no gradient or optimizer state for the base;
//   - the bytes sent per step are the theory for trainable-only reductions: the frozen bytes
//     are all-gathered like a unit's parameters, only the adapters are reduce-scattered;
//   - a checkpoint holds the adapters and their AdamW moments only (its files' sizes are
//     measured against 12 bytes per adapter element) plus a reference to the base with its
//     fingerprint, the same on every world size; resume is bit-exact, and a resume on
//     another base is refused naming both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/step_votes.h"
#include "fsdp/train/trainer.h"
#include "../common/distributed_train_checks.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 12;
constexpr double kTolerance = 1e-5;
constexpr double kParamTolerance = 5e-5;

const std::vector<std::string> kLora = {"lora.enabled=true", "lora.rank=4", "lora.alpha=8",
                                        "lora.targets=all-linear"};
const std::vector<std::string> kQlora = {"lora.enabled=true", "lora.rank=4", "lora.alpha=8",
                                         "lora.targets=[q_proj, v_proj, down_proj]", "model.quantization=nf4"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

config::Config tiny(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny", "model.num_layers=2",       "train.seq_len=32",
                                "train.micro_batch_size=2", "optim.lr=1e-2",     "optim.warmup_steps=2",
                                "train.max_steps=40",        "logging.metrics=false", "checkpoint.resume=none"};
  return config::load_config_string("data:\n  source: synthetic\n", "test", with(o, extra));
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<uint64_t> comm_bytes;
  std::vector<Tensor> adapters;  // every unit's trainable buffer, gathered in full
};

TrainRun train_steps(train::Trainer& t, int steps) {
  TrainRun r;
  for (int i = 0; i < steps; ++i) {
    const auto m = t.train_step();
    r.losses.push_back(m.loss);
    r.comm_bytes.push_back(m.comm_bytes);
  }
  for (int u = 0; u < t.engine().num_units(); ++u) r.adapters.push_back(t.engine().gather_full(u).clone());
  return r;
}

void expect_equivalent(const std::vector<std::string>& peft, const std::string& strategy, int accum) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  std::vector<std::string> o = with(peft, {"fsdp.sharding_strategy=" + strategy,
                                           "train.grad_accum_steps=" + std::to_string(accum)});
  if (strategy == "HYBRID_SHARD") o.push_back("fsdp.shard_group_size=" + std::to_string(n >= 4 ? 2 : n));
  const config::Config cfg = tiny(o);
  auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
  train::Trainer t(cfg, groups);
  const TrainRun got = train_steps(t, kSteps);
  auto local = dist::local_process_groups();
  train::Trainer one(tiny(with(peft, {"fsdp.sharding_strategy=NO_SHARD", "train.grad_accum_steps=" +
                                                                            std::to_string(accum * n)})),
                     local);
  const TrainRun want = train_steps(one, kSteps);
  for (int i = 0; i < kSteps; ++i)
    EXPECT_LT(std::abs(got.losses[i] - want.losses[i]) / want.losses[i], kTolerance)
        << strategy << " step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
  for (size_t u = 0; u < want.adapters.size(); ++u) {
    if (want.adapters[u].numel() == 0) continue;
    EXPECT_LT(test::rel_norm_error(got.adapters[u], want.adapters[u]), kParamTolerance) << strategy << " unit " << u;
  }
}

TEST(LoraEquivalence, FullShard) { expect_equivalent(kLora, "FULL_SHARD", 1); }
TEST(LoraEquivalence, ShardGradOpWithDropoutAndAccumulation) {
  expect_equivalent(with(kLora, {"lora.dropout=0.1"}), "SHARD_GRAD_OP", 2);
}
TEST(LoraEquivalence, NoShard) { expect_equivalent(kLora, "NO_SHARD", 1); }
TEST(LoraEquivalence, HybridShardWithRslora) { expect_equivalent(with(kLora, {"lora.rslora=true"}), "HYBRID_SHARD", 1); }
// Mixtral: adapters on the router and every expert, NF4 experts (dropout 0: an expert's
// rows are numbered in expert-sorted order, which depends on the micro-batch's routing).
TEST(QloraEquivalence, MixtureOfExpertsFullShard) {
  expect_equivalent({"lora.enabled=true", "lora.rank=4", "lora.alpha=8", "lora.targets=all-linear",
                     "model.quantization=nf4", "model.num_experts=4", "model.experts_per_token=2",
                     "model.router_aux_loss_coef=0.02"},
                    "FULL_SHARD", 1);
}
// A tied head reads the frozen table (the engine's Note [Units used twice], the table's bytes
// gathered again for the head), under mem's checkpointing modes and offloading.
TEST(QloraEquivalence, TiedEmbeddingsFullShardSelective) {
  expect_equivalent(with(kQlora, {"model.tie_word_embeddings=true", "train.activation_checkpointing=selective"}),
                    "FULL_SHARD", 1);
}
TEST(LoraEquivalence, TiedEmbeddingsShardGradOpFullOffloadWithDropout) {
  expect_equivalent(with(kLora, {"model.tie_word_embeddings=true", "lora.dropout=0.1",
                                 "train.activation_checkpointing=full", "train.activation_offload=true"}),
                    "SHARD_GRAD_OP", 2);
}
TEST(QloraEquivalence, FullShardWithAccumulation) { expect_equivalent(kQlora, "FULL_SHARD", 2); }
TEST(QloraEquivalence, ShardGradOpWithDropout) {
  expect_equivalent(with(kQlora, {"lora.dropout=0.2"}), "SHARD_GRAD_OP", 1);
}

std::vector<std::vector<uint8_t>> frozen_bytes(const FsdpEngine& e) {
  std::vector<std::vector<uint8_t>> out;
  for (int u = 0; u < e.num_units(); ++u) {
    const Tensor& s = e.frozen_shard(u);
    out.emplace_back(s.defined() ? s.data<uint8_t>() : nullptr, s.defined() ? s.data<uint8_t>() + s.numel() : nullptr);
  }
  return out;
}

TEST(LoraFrozen, BaseIsBitIdenticalAfterTrainingAndHoldsNoState) {
  dist::ProcessGroups& world = test::world_groups();
  for (const auto& peft : {kLora, kQlora}) {
    const config::Config cfg = tiny(with(peft, {"lora.dropout=0.1"}));
    auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
    train::Trainer t(cfg, groups);
    const auto before = frozen_bytes(t.engine());
    const TrainRun r = train_steps(t, 5);
    EXPECT_EQ(frozen_bytes(t.engine()), before);
    // ... while the adapters moved: B started at zero (PEFT's initialisation) and is not.
    double b_norm = 0;
    const model::UnitLayout& block = t.model().units()[1];
    for (const auto& p : block.params) {
      if (!p.name.ends_with(".lora_B")) continue;
      const Tensor b = block.view(r.adapters[1], p.name);
      for (int64_t i = 0; i < b.numel(); ++i) b_norm += b.get_flat(i) * b.get_flat(i);
    }
    // Trainable state is the adapters' only: 16 bytes (master, grad, two moments) per owned element.
    int64_t adapters = 0, owned = 0;
    for (int u = 0; u < t.engine().num_units(); ++u) {
      adapters += t.model().units()[size_t(u)].numel;
      owned += t.engine().shard_range(u).size;
    }
    EXPECT_EQ(t.engine().persistent_bytes(), uint64_t(16 * owned) + t.engine().frozen_bytes());
    EXPECT_GE(owned * world.world->size(), adapters);
    EXPECT_EQ(t.model().units().front().numel, 0);  // embedding: nothing trains
    EXPECT_GT(b_norm, 0.0);
  }
}

// FSDP's volume with a frozen half (test_fsdp.cpp's expected_bytes, S_u the trainable shard
// and F_u the frozen shard in bytes): FULL_SHARD gathers both twice a step (the last unit
// once, and the frozen embedding once: its backward is skipped) and reduce-scatters S_u
// only; SHARD_GRAD_OP gathers both once; NO_SHARD gathers nothing and all-reduces the
// adapters; plus the loss votes and the grad-norm all-reduce.
double expected_bytes(const std::string& strategy, const train::Trainer& t, int world) {
  const int n = strategy == "NO_SHARD" ? 1 : world;
  const auto& units = t.model().units();
  double total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const double S = units[u].numel == 0 ? 0 : double(shard_range(units[u].numel, n, 0).size) * 4;
    const double F = units[u].frozen_bytes == 0 ? 0 : double(shard_range(units[u].frozen_bytes, n, 0).size);
    const double gathers = strategy == "FULL_SHARD" ? (u + 1 == units.size() || u == 0 ? 1 : 2) : 1;
    if (strategy != "NO_SHARD") total += (n - 1) * (S + F) * gathers + (n - 1) * S;
    else total += 2.0 * (world - 1) / world * double(units[u].numel) * 4;
  }
  total += 2.0 * (world - 1) / world * 8 * train::StepVotes::kSlots;
  total += 2.0 * (n - 1) / n * 8;
  return total;
}

TEST(LoraVolume, BytesPerStepAreTheTrainableOnlyTheory) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  for (const auto& peft : {kLora, kQlora}) {
    for (const std::string strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
      const config::Config cfg = tiny(with(peft, {"fsdp.sharding_strategy=" + strategy}));
      auto groups = dist::split_process_groups(world, train::shard_group_size(cfg));
      train::Trainer t(cfg, groups);
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(double(t.train_step().comm_bytes), expected_bytes(strategy, t, n)) << strategy << " step " << i;
    }
  }
}

std::string scratch(const std::string& name) {
  return test::shared_scratch(*test::world_groups().world, "fsdp_mpi_lora_" + name);
}

// A save after 3 steps, a new trainer resuming it for 3 more: the same losses and adapters,
// bit for bit, as 6 straight steps; the checkpoint holds the adapters only.
void expect_resume_bit_exact(const std::vector<std::string>& peft, const std::string& name) {
  dist::ProcessGroups& world = test::world_groups();
  const std::string d1 = scratch(name + "_a"), d2 = scratch(name + "_b");
  const std::vector<std::string> o = with(peft, {"lora.dropout=0.1", "checkpoint.resume=auto"});
  const config::Config a = tiny(with(o, {"run.dir=" + d1})), b = tiny(with(o, {"run.dir=" + d2}));
  auto groups = dist::split_process_groups(world, train::shard_group_size(a));
  TrainRun want;
  {
    train::Trainer t(a, groups);
    want = train_steps(t, 6);
  }
  TrainRun got;
  int64_t trainable = 0;
  {
    train::Trainer t(b, groups);
    got = train_steps(t, 3);
    t.save_checkpoint();
    t.finish_checkpoint();
    for (const auto& u : t.model().units()) trainable += u.numel;
  }
  world.world->barrier();
  train::Trainer t(b, groups);
  ASSERT_EQ(t.step(), 3);
  const TrainRun more = train_steps(t, 3);
  got.losses.insert(got.losses.end(), more.losses.begin(), more.losses.end());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got.losses[size_t(i)], want.losses[size_t(i)]) << name << " step " << i + 1;
  for (size_t u = 0; u < want.adapters.size(); ++u)
    EXPECT_EQ(std::memcmp(more.adapters[u].data_ptr(), want.adapters[u].data_ptr(), want.adapters[u].nbytes()), 0)
        << name << " unit " << u;

  // The checkpoint: adapters and moments only (12 bytes per element: master, exp_avg,
  // exp_avg_sq; safetensors headers and metadata on top), and the base by reference.
  const ckpt::CheckpointReader reader(d2 + "/checkpoints/step_3");
  uint64_t bytes = 0;
  for (const auto& f : reader.manifest().files) bytes += f.bytes;
  EXPECT_GE(bytes, uint64_t(12 * trainable));
  EXPECT_LT(bytes, uint64_t(12 * trainable) + 16384u * uint64_t(reader.manifest().files.size()));
  ASSERT_TRUE(reader.manifest().base.has_value());
  EXPECT_EQ(reader.manifest().base->path, "");
  EXPECT_EQ(reader.manifest().base->quantization, peft == kQlora ? "nf4" : "none");
  EXPECT_GT(reader.manifest().base->bytes, uint64_t(12 * trainable));  // the base is the bulk, and not in the files
  if (world.world->rank() == 0)
    std::printf("%s checkpoint: %llu bytes for %lld adapter elements; the base it references: %llu bytes\n",
                name.c_str(), (unsigned long long)bytes, (long long)trainable,
                (unsigned long long)reader.manifest().base->bytes);
}

TEST(LoraCheckpoint, ResumeIsBitExactAndHoldsAdaptersOnly) { expect_resume_bit_exact(kLora, "lora"); }
TEST(QloraCheckpoint, ResumeIsBitExactAndHoldsAdaptersOnly) { expect_resume_bit_exact(kQlora, "qlora"); }

// The base's fingerprint does not depend on the world size, and a resume on another base
// (here: another seed's) is refused naming both.
TEST(LoraCheckpoint, ResumeOnAnotherBaseIsRefused) {
  dist::ProcessGroups& world = test::world_groups();
  const std::string d = scratch("other_base");
  const config::Config a = tiny(with(kQlora, {"run.dir=" + d, "checkpoint.resume=auto"}));
  {
    auto groups = dist::split_process_groups(world, train::shard_group_size(a));
    train::Trainer t(a, groups);
    t.train_step();
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  world.world->barrier();
  if (world.world->rank() == 0) {  // one process resumes what N saved: the same fingerprint
    auto local = dist::local_process_groups();
    train::Trainer t(a, local);
    EXPECT_EQ(t.step(), 1);
    const config::Config other = tiny(with(kQlora, {"run.dir=" + d, "checkpoint.resume=auto", "train.seed=7"}));
    try {
      train::Trainer u(other, local);
      ADD_FAILURE() << "resumed on another base";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not the same base model"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the seeded base (nf4"), std::string::npos) << e.what();
    }
  }
  world.world->barrier();
}

}  // namespace
}  // namespace fsdp
