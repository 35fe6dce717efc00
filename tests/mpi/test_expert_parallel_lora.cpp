// LoRA and QLoRA on the experts under expert parallelism (issue 28; Note [LoRA on
// expert-parallel experts] in model/mlp_moe.h), under mpiexec with 2 and 4 ranks (np1 has
// no layout). The two tiny Mixtrals of test_expert_parallel.cpp (8 experts, top-2, 64 wide:
// "mixtral8" with the load-balancing and z-losses and auxiliary-loss-free balancing, and
// tiny_moe's routing) with adapters on every linear layer, the experts' w1, w3 and w2
// included (they live in the expert units, the block keeps attention's and the router's),
// against one process training the same global batch:
//  - a case per layout the world holds (2 ranks: E=2 LoRA; 4 ranks: E=4 QLoRA, an NF4 base
//    with unsharded expert units; E=2 x FULL_SHARD 2 and E=2 x HYBRID_SHARD 2x2 LoRA), all
//    with dropout 0.1, each 20 steps with every loss within 1e-5 relative and every adapter
//    within 1e-5 norm-wise, then run again under another activation checkpointing mode
//    (none, full, selective rotate over the cases), the same bits. The dropout holds the
//    mask order: an expert's received rows keep their source's numbers, and any other
//    numbering drops other elements than one process and misses its losses from step 2 on
//    (measured at E=2: keyed by the received order, 1.1e-5 at step 2 and 3.6e-4 at step 7;
//    by the source's sorted position from this rank's first row, 3.7e-5 and 9.7e-4 at
//    step 15);
//  - the golden Mixtral folder and PEFT's adapter for it (lora.init_from) load at E = the
//    world as one process loads them, to the bit, and train as one process;
//  - a checkpoint saved at E = the world resumes at E=1 (FULL_SHARD over the world) and
//    continues the uninterrupted run's losses within 1e-5 (the base's fingerprint is one
//    process's), and its PEFT adapter export is, to the bit, that of the same state saved
//    by one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "fsdp/train/checkpoint_export.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 20;
constexpr int kGlobalMicroBatches = 4;  // of 2 sequences, at every layout
constexpr double kTolerance = 1e-5;
// Adam's eps at 1e-5, as test_tensor_parallel_lora.cpp's kParamTolerance explains: at the
// default 1e-8 an adapter element whose first gradient is near eps turns summation-order
// rounding into a visible step.
constexpr double kParamTolerance = 1e-5;

// QLoRA's keys: every quantized weight (64 wide, MLP 32) is a multiple of the NF4 block.
const std::vector<std::string> kQlora = {"model.quantization=nf4", "lora.targets=[q_proj, v_proj, w1, w2]"};

// "mixtral8"'s routing keys beside tiny_moe's (test_expert_parallel.cpp's model_keys).
const std::vector<std::string> kMixtral8 = {"model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001",
                                            "model.router_bias_update_rate=0.01"};

// `expert` 0: one process. `extra`: the model's keys (QLoRA's, mixtral8's), the layout's.
config::Config make(int expert, int data_ranks, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny_moe",      "model.num_layers=2",         "model.vocab_size=128",
                                "model.hidden_size=64",       "model.num_heads=4",          "model.num_kv_heads=2",
                                "model.intermediate_size=32", "model.num_experts=8",        "model.experts_per_token=2",
                                "lora.enabled=true",          "lora.rank=4",                "lora.alpha=8",
                                "lora.targets=all-linear",    "lora.dropout=0.1",           "train.seq_len=16",
                                "train.micro_batch_size=2",   "optim.lr=1e-2",              "optim.eps=1e-5",
                                "optim.warmup_steps=2",       "train.max_steps=100",        "logging.metrics=false",
                                "checkpoint.keep_last=10",
                                "train.grad_accum_steps=" + std::to_string(kGlobalMicroBatches / data_ranks)};
  o.push_back(expert > 0 ? "parallel.expert=" + std::to_string(expert) : "fsdp.sharding_strategy=NO_SHARD");
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, Tensor> adapters;  // every adapter this rank holds (its experts'), whole
};

TrainRun train(const config::Config& cfg, dist::ProcessGroups& groups, int steps, bool save = false) {
  train::Trainer t(cfg, groups);
  TrainRun r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(t.train_step().loss);
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor local = t.engine().gather_full(u).clone();
    for (const model::ParamSlot& s : t.model().units()[size_t(u)].params)
      r.adapters[s.name] = local.narrow(0, s.offset, s.numel).clone();
  }
  if (save) {
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  return r;
}

// One process over the same global batch (every rank computes it alone).
TrainRun reference(int steps, std::vector<std::string> model) {
  auto local = dist::local_process_groups();
  model.push_back("checkpoint.resume=none");
  return train(make(0, 1, model), local, steps);
}

void expect_losses_near(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                        double* worst = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(got[i] - want[i]) / want[i];
    if (worst != nullptr) *worst = std::max(*worst, e);
    EXPECT_LT(e, kTolerance) << what << " step " << i + 1 << ": " << got[i] << " vs " << want[i];
  }
}

// Each adapter this rank holds against one process's of that name.
void expect_adapters_near(const TrainRun& got, const TrainRun& want, const std::string& what, double* worst) {
  int experts = 0;
  for (const auto& [name, w] : got.adapters) {
    ASSERT_TRUE(want.adapters.count(name)) << what << ": " << name;
    const double e = test::rel_norm_error(w, want.adapters.at(name));
    *worst = std::max(*worst, e);
    EXPECT_LT(e, kParamTolerance) << what << ": " << name;
    experts += name.find(".experts.") != std::string::npos;
  }
  EXPECT_GT(experts, 0) << what << ": no expert adapter on this rank";
}

struct Case {
  int expert;
  std::vector<std::string> fsdp;  // beside the default FULL_SHARD
  bool qlora, mixtral8;
  std::vector<std::string> mode, again;  // activation checkpointing of the run and of its rerun
  std::string name;
};

TEST(ExpertParallelLora, EveryLayoutLoraAndQloraEqualsOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  const std::vector<std::string> none = {}, full = {"train.activation_checkpointing=full"};
  const std::vector<std::string> selective = {"train.activation_checkpointing=selective"};
  const std::vector<std::string> hybrid = {"fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"};
  const std::vector<Case> cases =
      n == 2 ? std::vector<Case>{{2, {}, false, true, none, full, "E=2 LoRA mixtral8"}}
             : std::vector<Case>{{4, {}, true, false, selective, full, "E=4 QLoRA tiny_moe"},
                                 {2, {}, false, true, full, selective, "E=2 x FULL_SHARD 2 LoRA mixtral8"},
                                 {2, hybrid, false, true, none, selective, "E=2 x HYBRID_SHARD 2x2 LoRA mixtral8"}};
  double worst_loss = 0, worst_adapter = 0;
  for (const Case& c : cases) {
    std::vector<std::string> model = c.qlora ? kQlora : std::vector<std::string>{};
    if (c.mixtral8) model.insert(model.end(), kMixtral8.begin(), kMixtral8.end());
    std::vector<std::string> keys = model;
    keys.push_back("checkpoint.resume=none");
    keys.insert(keys.end(), c.fsdp.begin(), c.fsdp.end());
    std::vector<std::string> first = keys, again = keys;
    first.insert(first.end(), c.mode.begin(), c.mode.end());
    again.insert(again.end(), c.again.begin(), c.again.end());
    const config::Config cfg = make(c.expert, n, first);
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    const TrainRun got = train(cfg, groups, kSteps);
    const TrainRun want = reference(kSteps, model);
    expect_losses_near(got.losses, want.losses, c.name, &worst_loss);
    expect_adapters_near(got, want, c.name, &worst_adapter);
    const TrainRun rerun = train(make(c.expert, n, again), groups, kSteps);
    EXPECT_EQ(rerun.losses, got.losses) << c.name << " again";
    for (const auto& [name, w] : got.adapters)
      EXPECT_EQ(std::memcmp(rerun.adapters.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0)
          << c.name << " again: " << name;
  }
  if (world.world->rank() == 0)
    std::printf("LoRA/QLoRA on the experts on %d ranks vs one process, %d steps: loss %.1e, adapters %.1e\n", n,
                kSteps, worst_loss, worst_adapter);
}

// init_from a Hugging Face folder and a PEFT adapter folder at E = the world: the golden
// Mixtral (tests/golden/mixtral_tiny, 4 experts) as the frozen base and PEFT's adapter for it
// (mixtral_lora_tiny/r4_alpha8, on the router and every expert) load into each rank's
// experts as one process loads them, to the bit, and a few steps from there equal one
// process's (the frozen experts read from the folder by name into the expert units).
config::Config from_folders(int expert, int data_ranks) {
  const std::string golden = std::string(FSDP_SOURCE_DIR) + "/tests/golden/";
  std::vector<std::string> o = {"train.grad_accum_steps=" + std::to_string(kGlobalMicroBatches / data_ranks)};
  o.push_back(expert > 0 ? "parallel.expert=" + std::to_string(expert) : "fsdp.sharding_strategy=NO_SHARD");
  return config::load_config_string(
      "model:\n  init_from: " + golden + "mixtral_tiny\nlora:\n  enabled: true\n  rank: 4\n  alpha: 8\n"
      "  targets: all-linear\n  init_from: " + golden + "mixtral_lora_tiny/r4_alpha8\ndata:\n  source: synthetic\n"
      "train:\n  seq_len: 16\n  micro_batch_size: 2\n  max_steps: 100\noptim:\n  lr: 1e-2\n  eps: 1e-5\n"
      "  warmup_steps: 0\nlogging:\n  metrics: false\ncheckpoint:\n  resume: none\n",
      "test", o);
}

TEST(ExpertParallelLora, HuggingFaceAndPeftFoldersInitAsOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  constexpr int K = 3;
  const config::Config cfg = from_folders(n, n);
  auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  auto local = dist::local_process_groups();
  const TrainRun loaded = train(cfg, groups, 0), loaded_one = train(from_folders(0, 1), local, 0);
  for (const auto& [name, w] : loaded.adapters)
    EXPECT_EQ(std::memcmp(loaded_one.adapters.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0)
        << name << " as loaded";
  const TrainRun got = train(cfg, groups, K), want = train(from_folders(0, 1), local, K);
  expect_losses_near(got.losses, want.losses, "E=" + std::to_string(n) + " from the folders");
  double worst = 0;
  expect_adapters_near(got, want, "E=" + std::to_string(n) + " from the folders", &worst);
}

TEST(ExpertParallelLora, CheckpointResumesAtE1AndExportsTheAdapterAsOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism is tested on 2 and 4 ranks";
  constexpr int K = 3;
  const TrainRun want = reference(2 * K, {});
  const std::string dir = test::shared_scratch(*world.world, "fsdp_ep_lora_ckpt");
  std::vector<double> got;
  {
    const config::Config cfg = make(n, n, {"run.dir=" + dir, "checkpoint.resume=none"});
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    got = train(cfg, groups, K, /*save=*/true).losses;
  }
  world.world->barrier();
  const std::string ep = test::checkpoint_step_dir(dir, K);
  if (world.world->rank() == 0) {
    // An exception becomes a failure so that every rank still meets the barrier.
    try {
      auto local = dist::local_process_groups();
      {
        train::Trainer t(make(0, 1, {"run.dir=" + dir + "/one", "checkpoint.resume=" + ep}), local);
        EXPECT_EQ(t.step(), K);
        t.save_checkpoint();
        t.finish_checkpoint();
      }
      test::expect_exports_equal(ep, test::checkpoint_step_dir(dir + "/one", K), dir, "expert-parallel LoRA",
                                 train::ExportAs::PeftAdapter);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  world.world->barrier();
  {
    const config::Config cfg = make(1, n, {"run.dir=" + dir + "/e1", "checkpoint.resume=" + ep});
    auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
    const TrainRun more = train(cfg, groups, K);
    got.insert(got.end(), more.losses.begin(), more.losses.end());
  }
  expect_losses_near(got, want.losses, "E=" + std::to_string(n) + " then E=1");
  world.world->barrier();
}

}  // namespace
}  // namespace fsdp
