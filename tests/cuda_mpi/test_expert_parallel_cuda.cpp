// Expert parallelism on CUDA (train.device: cuda; issue 28, Note [Expert-parallel dispatch]
// in model/moe_dispatch.h) through the trainer, under mpiexec: on 2 ranks E=2 (the mesh
// 1x1x2x1: the expert group is the shard group's two ranks, the expert units unsharded), on
// 4 ranks E=2 x FULL_SHARD 2 (1x2x2x1: two expert groups, each expert unit sharded over
// the two ranks holding the same experts); skipped on one rank. The expert and expert
// shard groups are NCCL communicators (the stand-in over MPI in the emulation build), the
// routing's counts are all-gathered on the device and read back once per layer (Note
// [Expert counts on a GPU]), and the tokens travel by the NCCL all_to_all_v. An 8-expert
// top-2 tiny Mixtral (the load-balancing loss, the z-loss and auxiliary-loss-free
// balancing) trains kSteps steps (6, not the CPU test's 20: the emulator is slow) and
// equals one CUDA process training the same global batch:
//   1e-5 per-step loss, aux loss and z-loss, relative: the bound; the expert
//        GEMMs see the same rows in another order (source rank by source rank), so their
//        weight gradients sum in another order, and the FSDP reduce-scatters too;
//   1e-5 final parameters, norm-wise per parameter, every expert's included (each expert
//        rank's experts all-gathered to rank 0): the CPU layouts' bound
//        (tests/mpi/test_expert_parallel.cpp);
//   exact: every step's global expert counts (integers) and the routing biases (a
//        function of those counts);
//   bits: the same run twice, and under full and selective activation checkpointing (the
//        recompute exchanges and dispatches again): on 2 ranks;
//   bytes: every step's bytes each rank sends equal the theory
//        (tests/common/expert_parallel_bytes.h), without (and on 2 ranks with) full
//        checkpointing;
//   host waits (emulator, 2 ranks): as many per step as FSDP alone's on the same ranks: the
//        count exchange's read-back replaces the group sizes', it adds none.
// A second test holds LoRA on the experts (2 ranks) and E=2 x T=2 (4 ranks) to one CUDA
// process's losses and routing. The reference runs on rank 0 alone (the emulator is slow);
// the comparison is there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../common/distributed_train_checks.h"
#include "../common/expert_parallel_bytes.h"
#include "../common/moe_run.h"
#include "cuda_mpi_test_env.h"
#if defined(FSDP_CUDA_EMULATION)
#include <cuda_runtime.h>  // the emulator's fsdpEmuHostBlockingCalls
#endif
#include "fsdp/core/host_wait.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"

namespace fsdp {
namespace {

constexpr int kSteps = 6;
constexpr double kTolerance = 1e-5;

bool rank0() { return test::world_groups().world->rank() == 0; }

// tests/mpi/test_expert_parallel.cpp's "mixtral8", narrower for the emulator: 8 experts,
// top-2, every router loss and the routing biases; 4 heads of 8, 2 key/value heads.
// `expert` 0: one process over `data_ranks` micro-batches per step; else one micro-batch
// per rank (so the step's routing is that micro-batch's: the bytes' theory).
config::Config moe_config(int expert, int data_ranks, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny_moe",
                                "model.num_layers=2",
                                "model.vocab_size=64",
                                "model.hidden_size=32",
                                "model.num_heads=4",
                                "model.num_kv_heads=2",
                                "model.intermediate_size=16",
                                "model.num_experts=8",
                                "model.experts_per_token=2",
                                "model.router_aux_loss_coef=0.02",
                                "model.router_z_loss_coef=0.001",
                                "model.router_bias_update_rate=0.01",
                                "train.seq_len=16",
                                "train.micro_batch_size=2",
                                "optim.lr=3e-3",
                                "optim.warmup_steps=2",
                                "train.max_steps=20",
                                "logging.metrics=false",
                                "checkpoint.resume=none",
                                "train.device=cuda"};
  if (expert > 0) {
    o.push_back("parallel.expert=" + std::to_string(expert));
    o.push_back("fsdp.sharding_strategy=FULL_SHARD");
    o.push_back("train.grad_accum_steps=1");
  } else {
    o.push_back("fsdp.sharding_strategy=NO_SHARD");
    o.push_back("train.grad_accum_steps=" + std::to_string(data_ranks));
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

class CudaExpertParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
    const int n = test::world_groups().world->size();
    if (n != 2 && n != 4) GTEST_SKIP() << "expert parallelism on CUDA is tested on 2 and 4 ranks";
  }
};

// weights: every parameter on the host, whole: rank 0 of an expert-parallel run holds every
// expert rank's experts too (all-gathered over its expert group), the other ranks their own.
struct EpRun : test::MoeRun {
  std::vector<double> bytes, theory;  // per step: what the counters saw, and the theory
  unsigned long long host_waits = 0;   // in the second step (the emulator counts them)
};

// One step, counting the host's waits for the device (the emulator's count, 0 on a GPU).
// The NCCL communicators' watchdog hook is off meanwhile: with it a wait polls an event,
// which the emulator does not count; without it each is a cudaStreamSynchronize, counted.
obs::StepMetrics counting_host_waits(train::Trainer& t, unsigned long long& waits) {
#if defined(FSDP_CUDA_EMULATION)
  const cuda::HostWaitHook hook = cuda::host_wait_hook();
  cuda::set_host_wait_hook(nullptr);
  const unsigned long long before = fsdpEmuHostBlockingCalls();
  const obs::StepMetrics m = t.train_step();
  waits = fsdpEmuHostBlockingCalls() - before;
  cuda::set_host_wait_hook(hook);
  return m;
#else
  waits = 0;
  return t.train_step();
#endif
}

// Rank 0 gets every expert rank's experts of expert unit `u` (this rank's: `local`),
// all-gathered over the host expert group and named as expert rank r's unit names them
// (model::llama_units); a collective over the expert group.
void add_expert_weights(train::Trainer& t, const dist::ProcessGroups& g, int u, const Tensor& local,
                        std::map<std::string, Tensor>& out) {
  const int E = g.expert->size();
  const Tensor all = Tensor::empty({local.numel() * E}, DType::F32);
  g.expert->wait(g.expert->all_gather(local, all));  // host tensors over the host group
  if (!rank0()) return;
  for (int r = 0; r < E; ++r) {
    const std::vector<model::UnitLayout> units = model::llama_units(t.model().config(), 0, r);
    for (const model::ParamSlot& s : units[size_t(u)].params)
      out[s.name] = all.narrow(0, int64_t(r) * local.numel() + s.offset, s.numel).clone();
  }
}

// `bytes_recompute`: hold each step's bytes to the theory (with or without the recompute's
// second forward); unset: not (selective checkpointing's recompute has no formula there).
// `weights`: gather every parameter to the host (plain layouts without tensor parallelism:
// the expert ranks' units are named by model::llama_units).
EpRun train(const config::Config& cfg, const dist::ProcessGroups& host, std::optional<bool> bytes_recompute = {},
            int steps = kSteps, bool weights = true) {
  dist::ProcessGroups groups = host;
  train::Trainer t(cfg, groups);
  EXPECT_TRUE(t.device().is_cuda());
  EpRun r;
  for (int i = 0; i < steps; ++i) {
    const obs::StepMetrics m = i == 1 ? counting_host_waits(t, r.host_waits) : t.train_step();
    r.add_step(m);
    if (bytes_recompute) {
      r.bytes.push_back(double(m.comm_bytes));
      r.theory.push_back(test::expert_parallel_step_bytes(t, groups, *bytes_recompute));
    }
  }
  r.bias = t.model().router_bias()->values();
  for (int u = 0; weights && u < t.engine().num_units(); ++u) {
    const Tensor local = t.engine().gather_full(u).to(Device::cpu());
    for (const model::ParamSlot& s : t.model().units()[size_t(u)].params)
      r.weights[s.name] = local.narrow(0, s.offset, s.numel).clone();
    if (t.model().units()[size_t(u)].experts_of >= 0) add_expert_weights(t, groups, u, local, r.weights);
  }
  return r;
}

void expect_same_bits(const EpRun& again, const EpRun& got, const std::string& what) {
  EXPECT_EQ(again.losses, got.losses) << what;
  EXPECT_EQ(again.load, got.load) << what;
  EXPECT_EQ(again.bias, got.bias) << what;
  ASSERT_EQ(again.weights.size(), got.weights.size()) << what;
  for (const auto& [name, w] : got.weights)
    EXPECT_EQ(std::memcmp(again.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << what << ": " << name;
}

void expect_bytes_are_the_theory(const EpRun& r, const std::string& what) {
  ASSERT_EQ(r.bytes.size(), size_t(kSteps)) << what;
  for (size_t i = 0; i < r.bytes.size(); ++i) EXPECT_EQ(r.bytes[i], r.theory[i]) << what << ", step " << i + 1;
}

// One process on this rank's GPU over the same global batch (rank 0 only; the others get nothing).
EpRun one_process(int data_ranks, const std::vector<std::string>& extra = {}, bool weights = true) {
  if (!rank0()) return {};
  auto local = dist::local_process_groups();
  local.world_info.local_rank = test::world_groups().world_info.local_rank;
  return train(moe_config(0, data_ranks, extra), local, {}, kSteps, weights);
}

// make_nccl_process_groups' expert dimension: at E=2 the expert group (2 ranks) and on 4
// ranks the expert shard group (2 ranks) are NCCL communicators of their own over the host
// groups' ranks that move device tensors; at E=1 the expert group is this rank alone and
// the expert shard group, the shard group's ranks, is the shard communicator itself (no
// second NCCL communicator over the same ranks).
TEST_F(CudaExpertParallel, NcclGroupsOfTheExpertDimension) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  for (const int E : {1, 2}) {
    SCOPED_TRACE("E=" + std::to_string(E));
    const dist::ProcessGroups host = dist::split_process_groups(world, dist::MeshSpec{1, 0, E});
    const dist::ProcessGroups dev = dist::make_nccl_process_groups(host, test::rank_device());
    EXPECT_EQ(dev.expert->world_ranks(), host.expert->world_ranks());
    EXPECT_EQ(dev.expert_shard->world_ranks(), host.expert_shard->world_ranks());
    EXPECT_EQ(dev.expert_shard->size(), n / E);
    if (E == 1) {
      EXPECT_EQ(dev.expert->size(), 1);
      EXPECT_EQ(dev.expert_shard.get(), dev.shard.get()) << "the shard group's twin shares its communicator";
      continue;
    }
    EXPECT_NE(dev.expert.get(), dev.shard.get()) << "the tokens' group has a stream and counters of its own";
    EXPECT_NE(dev.expert_shard.get(), dev.shard.get());
    for (const auto& c : {dev.expert, dev.expert_shard}) {
      if (c->size() == 1) continue;
      ASSERT_NE(dynamic_cast<dist::NcclCommunicator*>(c.get()), nullptr) << c->name();
      // Each member's world rank, all-gathered on the device in group-rank order.
      const Device gpu = Device::cuda(test::rank_device());
      Tensor mine = Tensor::empty({1}, DType::F32, gpu);
      mine.fill_(double(world.world->rank()));
      const Tensor all = Tensor::empty({c->size()}, DType::F32, gpu);
      c->wait(c->all_gather(mine, all));
      const Tensor got = all.to(Device::cpu());
      for (int r = 0; r < c->size(); ++r) EXPECT_EQ(got.get_flat(r), c->world_ranks()[size_t(r)]) << c->name();
    }
  }
}

TEST_F(CudaExpertParallel, Mixtral8EqualsOneProcessBitIdenticalUnderCheckpointing) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const config::Config cfg = moe_config(2, n);
  const dist::ProcessGroups groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  ASSERT_EQ(groups.mesh.shape().expert, 2);
  ASSERT_EQ(groups.expert_shard->size(), n / 2);
  const EpRun got = train(cfg, groups, /*bytes_recompute=*/false);
  expect_bytes_are_the_theory(got, "no checkpointing");
  // The reruns on 2 ranks only: the recompute's code is the same at any layout, and the
  // emulator's time is short (4 ranks share the CI machine's 2 cores).
  if (n == 2) {
    expect_same_bits(train(cfg, groups), got, "the same run twice");
    const EpRun full = train(moe_config(2, n, {"train.activation_checkpointing=full"}), groups, true);
    expect_same_bits(full, got, "full checkpointing");
    expect_bytes_are_the_theory(full, "full checkpointing");
    expect_same_bits(train(moe_config(2, n, {"train.activation_checkpointing=selective"}), groups), got,
                     "selective checkpointing");
#if defined(FSDP_CUDA_EMULATION)
    // The count exchange replaces the group sizes' read-back: the host waits for the device
    // as often per step as without expert parallelism (once per MoE layer, and the step's
    // own read-backs), on the same ranks and micro-batch.
    const config::Config alone = moe_config(1, n);
    const EpRun fsdp = train(alone, dist::split_process_groups(world, train::mesh_spec(alone)), {}, 2);
    EXPECT_EQ(got.host_waits, fsdp.host_waits) << "host waits per step, E=2 against FSDP alone";
    EXPECT_GE(fsdp.host_waits, 2u) << "the MoE layers' read-backs are counted";
    if (rank0()) std::printf("host waits per CUDA step: %llu at E=2, %llu with FSDP alone\n", got.host_waits, fsdp.host_waits);
#endif
  }

  const EpRun want = one_process(groups.mesh.data_parallel_size());
  if (!rank0()) return;
  double worst_loss = 0, worst_weight = 0;
  const auto expect_near = [&](const std::vector<double>& g, const std::vector<double>& w, const char* which) {
    ASSERT_EQ(g.size(), w.size()) << which;
    for (size_t i = 0; i < g.size(); ++i) {
      const double e = std::abs(g[i] - w[i]) / std::abs(w[i]);
      worst_loss = std::max(worst_loss, e);
      EXPECT_LT(e, kTolerance) << which << ", step " << i + 1 << ": " << g[i] << " vs " << w[i];
    }
  };
  expect_near(got.losses, want.losses, "loss");
  expect_near(got.aux, want.aux, "aux loss");
  expect_near(got.z, want.z, "z-loss");
  EXPECT_EQ(got.load, want.load) << "the global expert counts";
  EXPECT_EQ(got.bias, want.bias) << "the routing biases";
  EXPECT_GT(model::router_bias_max_abs(want.bias), 0.0f) << "the biases never moved";
  EXPECT_LT(got.losses.back(), got.losses.front()) << "it trains";
  ASSERT_EQ(got.weights.size(), want.weights.size()) << "every parameter, every expert's included";
  for (const auto& [name, w] : want.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name;
    const double e = test::rel_norm_error(got.weights.at(name), w);
    worst_weight = std::max(worst_weight, e);
    EXPECT_LT(e, kTolerance) << name;
  }
  // The measured distances, which docs/expert-parallelism.md quotes.
  std::printf("CUDA E=2, mesh %s vs one CUDA process, %d steps: worst loss %.1e relative, worst weight %.1e norm-wise\n",
              groups.mesh.shape().str().c_str(), kSteps, worst_loss, worst_weight);
}

// The layouts the CPU tests hold in full (tests/mpi/test_expert_parallel_lora.cpp and the
// E x T cases of test_expert_parallel.cpp), here on CUDA against one CUDA process by their
// losses and routing (their weights are adapters, or tensor slices): on 2 ranks LoRA and
// its dropout on every linear layer, the experts' included, at E=2 (Note [LoRA on
// expert-parallel experts]: each received row's mask keyed by its source's number); on 4
// ranks E=2 x T=2 (Note [Experts under expert and tensor parallelism]), every step's bytes
// the theory.
TEST_F(CudaExpertParallel, LoraOnTheExpertsAndExpertTimesTensorEqualOneProcess) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  const std::vector<std::string> lora = {"lora.enabled=true", "lora.rank=4", "lora.alpha=8", "lora.dropout=0.1",
                                         "lora.targets=all-linear", "optim.lr=1e-2"};
  const std::vector<std::string> extra = n == 2 ? lora : std::vector<std::string>{"parallel.tensor=2"};
  const config::Config cfg = moe_config(2, n, extra);
  const dist::ProcessGroups groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  ASSERT_EQ(groups.mesh.shape().expert, 2);
  ASSERT_EQ(groups.mesh.shape().tensor, n == 2 ? 1 : 2);
  const EpRun got = train(cfg, groups, n == 4 ? std::optional<bool>(false) : std::nullopt, kSteps, false);
  if (n == 4) expect_bytes_are_the_theory(got, "E=2 x T=2");
  const EpRun want = one_process(groups.mesh.data_parallel_size(), n == 2 ? lora : std::vector<std::string>{}, false);
  if (!rank0()) return;
  const std::string what = n == 2 ? "LoRA at E=2" : "E=2 x T=2";
  double worst = 0;
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    const double e = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
    worst = std::max(worst, e);
    EXPECT_LT(e, kTolerance) << what << ", step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
  }
  EXPECT_EQ(got.load, want.load) << what << ": the global expert counts";
  EXPECT_EQ(got.bias, want.bias) << what << ": the routing biases";
  EXPECT_LT(got.losses.back(), got.losses.front()) << what << ": it trains";
  std::printf("CUDA %s, mesh %s vs one CUDA process, %d steps: worst loss %.1e relative\n", what.c_str(),
              groups.mesh.shape().str().c_str(), kSteps, worst);
}

// Checkpoints at E > 1 on the device (manifest format version 3: one process's layout,
// Note [Expert-parallel dispatch]'s units written as runs): on 2 ranks, 3 steps at E=2, a
// save, then a trainer at E=1 (FULL_SHARD over the same 2 ranks, so the same global batch)
// resumes it for 3 more: the 6 losses equal the uninterrupted E=2 run's within 1e-5 (E
// changes only the expert GEMMs' row order), the routing exactly.
TEST_F(CudaExpertParallel, CheckpointSavedAtE2ResumesAtE1) {
  dist::ProcessGroups& world = test::world_groups();
  const int n = world.world->size();
  if (n != 2) GTEST_SKIP() << "on 2 ranks only (the emulator's time)";
  constexpr int K = 3;
  const std::string dir = test::shared_scratch(*world.world, "fsdp_cuda_ep_ckpt");
  const config::Config straight = moe_config(2, n, {"run.dir=" + dir});
  dist::ProcessGroups groups2 = dist::split_process_groups(world, train::mesh_spec(straight));
  const EpRun want = train(straight, groups2, {}, 2 * K, false);
  const std::vector<std::string> keys = {"run.dir=" + dir + "/resumed"};
  test::MoeRun got;
  {
    train::Trainer t(moe_config(2, n, keys), groups2);
    for (int i = 0; i < K; ++i) got.add_step(t.train_step());
    t.save_checkpoint();
    t.finish_checkpoint();
  }
  std::vector<std::string> resume = keys;
  resume.push_back("checkpoint.resume=auto");
  const config::Config at1 = moe_config(1, n, resume);
  dist::ProcessGroups groups1 = dist::split_process_groups(world, train::mesh_spec(at1));
  train::Trainer t(at1, groups1);
  ASSERT_EQ(t.step(), K);
  for (int i = 0; i < K; ++i) got.add_step(t.train_step());
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], kTolerance * std::abs(want.losses[i])) << "step " << i + 1;
  EXPECT_EQ(got.load, want.load) << "the global expert counts";
}

}  // namespace
}  // namespace fsdp
