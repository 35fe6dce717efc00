// Tensor parallelism on CUDA (train.device: cuda, parallel.tensor: 2) through the trainer,
// under mpiexec: on 2 ranks the mesh 1x1x2 (one tensor group), on 4 ranks 1x2x2 (T=2 x
// FULL_SHARD 2); skipped on one rank. The tensor group is an NCCL communicator (the
// stand-in over MPI in the emulation build), the vocabulary-parallel embedding and
// cross-entropy run their CUDA kernels, and the sequence-parallel all-gathers and
// reduce-scatters, the norm weights' gradient all-reduce and the two-level grad norm go
// over NCCL beside the FSDP engine's own collectives. A tiny dense Llama with GQA, alone,
// with LoRA adapters (dropout on) and as QLoRA (an NF4 base: each rank's slices of one
// process's quantization through the CUDA dequantizer's slice path), and a tiny Mixtral
// (4 experts, top-2, both router losses, auxiliary-loss-free balancing; Note [Experts
// under tensor parallelism]), alone and with LoRA, trains a few steps and equals one CUDA
// process over the same global batch:
//   1e-5 per-step loss, relative: the bound; a tensor group sums each row-parallel
//        output and each norm weight's gradient in another order than one process.
//   5e-5 final parameters, norm-wise per parameter (its slices stacked in rank order):
//        the bound tests/mpi/test_tensor_parallel.cpp holds the CPU layouts to, for its
//        reason (Adam amplifies a nearly-cancelled gradient's rounding up to lr).
//   bits: the same run twice (no atomics in any kernel of the step, NCCL's sums in a fixed
//        order).
//   Mixtral, beside those: every step's aux loss and z-loss within 1e-5, its expert counts
//        equal as integers (one tensor rank counts the tokens they all routed) and the
//        routing biases bit for bit (a function of those counts), as on the CPU
//        (tests/mpi/test_tensor_parallel_moe.cpp).
// The reference runs on rank 0 alone (the emulator is slow); the comparison is there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "cuda_mpi_test_env.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/model/router_bias.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/trainer.h"

namespace fsdp {
namespace {

constexpr int kSteps = 4;
constexpr double kLossTolerance = 1e-5;
constexpr double kParamTolerance = 5e-5;

// 4 heads of 8, 2 key/value heads (GQA 2), MLP 48, vocabulary 64, sequences of 16:
// everything divides by T=2; small enough for the emulator.
std::vector<std::string> model_keys() {
  return {"model.preset=tiny",          "model.num_layers=2",   "model.vocab_size=64", "model.hidden_size=32",
          "model.num_heads=4",          "model.num_kv_heads=2", "model.intermediate_size=48",
          "model.tie_word_embeddings=false"};
}

config::Config tiny(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"train.seq_len=16",     "train.micro_batch_size=2", "optim.lr=3e-3",
                                "optim.warmup_steps=2", "train.max_steps=20",       "logging.metrics=false",
                                "checkpoint.resume=none", "train.device=cuda"};
  for (const std::string& k : model_keys()) o.push_back(k);
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

class CudaTensorParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
    if (test::world_groups().world->size() % 2 != 0) GTEST_SKIP() << "T=2 needs an even world";
  }
};

struct TpRun {
  std::vector<double> losses, aux, z;                   // aux, z: a mixture of experts only
  std::vector<std::vector<std::vector<int64_t>>> load;  // [step][layer][expert]
  std::vector<std::vector<float>> bias;                 // the routing biases after the run
  std::map<std::string, Tensor> weights;                // every parameter, whole, on the host
};

TpRun train(const config::Config& cfg, dist::ProcessGroups& groups) {
  train::Trainer t(cfg, groups);
  EXPECT_TRUE(t.device().is_cuda());
  TpRun r;
  for (int i = 0; i < kSteps; ++i) {
    const obs::StepMetrics m = t.train_step();
    r.losses.push_back(m.loss);
    if (!m.aux_loss) continue;
    r.aux.push_back(*m.aux_loss);
    r.z.push_back(m.z_loss.value_or(-1));
    r.load.push_back(m.expert_load);
  }
  if (t.model().router_bias() != nullptr) r.bias = t.model().router_bias()->values();
  CommTensorGroup tensor(*groups.tensor);  // the host communicator of the tensor group
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor local = t.engine().gather_full(u).to(Device::cpu());
    for (const model::ParamSlot& s : t.model().units()[size_t(u)].params)
      r.weights[s.name] = test::whole_parameter(s, local, groups.tensor->size() > 1 ? &tensor : nullptr);
  }
  return r;
}

bool rank0() { return test::world_groups().world->rank() == 0; }

// One process on this rank's GPU over the same global batch: the data-parallel ranks'
// micro-batches become accumulation steps. Rank 0 only; the others get nothing.
TpRun one_process(int data_ranks, std::vector<std::string> extra) {
  if (!rank0()) return {};
  auto local = dist::local_process_groups();
  local.world_info.local_rank = test::world_groups().world_info.local_rank;
  extra.push_back("train.grad_accum_steps=" + std::to_string(data_ranks));
  extra.push_back("fsdp.sharding_strategy=NO_SHARD");
  return train(tiny(extra), local);
}

// T=2 x FULL_SHARD over the other ranks (none on 2 ranks, 2 on 4) with the keys `extra`:
// one process's losses and weights (the trainable ones: LoRA's adapters), and the same bits
// when run again.
void expect_tensor_parallel_equals_one_process(const std::vector<std::string>& extra, const char* what) {
  dist::ProcessGroups& world = test::world_groups();
  std::vector<std::string> keys = {"parallel.tensor=2", "fsdp.sharding_strategy=FULL_SHARD"};
  keys.insert(keys.end(), extra.begin(), extra.end());
  const config::Config cfg = tiny(keys);
  auto groups = dist::split_process_groups(world, train::mesh_spec(cfg));
  ASSERT_EQ(groups.tensor->size(), 2);
  const TpRun got = train(cfg, groups);
  const TpRun again = train(cfg, groups);
  for (int i = 0; i < kSteps; ++i)
    EXPECT_EQ(again.losses[size_t(i)], got.losses[size_t(i)]) << "rerun, step " << i + 1;
  EXPECT_EQ(again.bias, got.bias) << "rerun: the routing biases";
  for (const auto& [name, w] : got.weights)
    EXPECT_EQ(std::memcmp(again.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << "rerun: " << name;

  const TpRun want = one_process(groups.mesh.data_parallel_size(), extra);
  if (!rank0()) return;
  double worst_loss = 0, worst_param = 0;
  const auto expect_near = [&](const std::vector<double>& g, const std::vector<double>& w, const char* which) {
    ASSERT_EQ(g.size(), w.size()) << which;
    for (size_t i = 0; i < g.size(); ++i) {
      const double e = std::abs(g[i] - w[i]) / std::abs(w[i]);
      worst_loss = std::max(worst_loss, e);
      EXPECT_LT(e, kLossTolerance) << which << ", step " << i + 1 << ": " << g[i] << " vs " << w[i];
    }
  };
  expect_near(got.losses, want.losses, "loss");
  expect_near(got.aux, want.aux, "aux loss");
  expect_near(got.z, want.z, "z-loss");
  EXPECT_EQ(got.load, want.load) << "the expert counts";
  EXPECT_EQ(got.bias, want.bias) << "the routing biases";
  if (!want.aux.empty()) EXPECT_GT(model::router_bias_max_abs(want.bias), 0.0f) << "the biases never moved";
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (const auto& [name, w] : want.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name;
    const double e = test::rel_norm_error(got.weights.at(name), w);
    worst_param = std::max(worst_param, e);
    EXPECT_LT(e, kParamTolerance) << name;
  }
  // It trains: a full model's loss falls in 4 steps; LoRA's B starts at zero (PEFT's
  // initialisation) and must have moved, on the split and on the whole slots alike.
  bool lora = false;
  for (const auto& [name, w] : got.weights) {
    if (!name.ends_with(".lora_B")) continue;
    lora = true;
    double sum_sq = 0;
    for (int64_t i = 0; i < w.numel(); ++i) sum_sq += w.get_flat(i) * w.get_flat(i);
    EXPECT_GT(sum_sq, 0) << name << " never left zero";
  }
  if (!lora) EXPECT_LT(got.losses.back(), got.losses.front());
  std::printf("CUDA T=2 %s, mesh %s vs one CUDA process, %d steps: loss %.1e, params %.1e\n", what,
              groups.mesh.shape().str().c_str(), kSteps, worst_loss, worst_param);
}

TEST_F(CudaTensorParallel, DenseGqaEqualsOneProcessAndRerunsBitIdentical) {
  expect_tensor_parallel_equals_one_process({}, "dense");
}

// LoRA on every Linear with dropout: the adapters follow their base's split (lora_A whole
// on q/k/v/gate/up, split on o/down), the dropout kernel draws at the global column, and
// the adapters' partial gradients are all-reduced over the NCCL tensor group.
TEST_F(CudaTensorParallel, LoraWithDropoutEqualsOneProcessAndRerunsBitIdentical) {
  expect_tensor_parallel_equals_one_process(
      {"lora.enabled=true", "lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "lora.targets=all-linear"}, "LoRA");
}

// QLoRA: an NF4 base under adapters on q_proj, v_proj and down_proj, each rank's slice of
// one process's quantization with a float absmax per block, dequantized by the CUDA
// kernel's slice path to one process's bits. Hidden and MLP 128, so that o's and down's 64
// columns per rank are whole NF4 blocks; one layer, for the emulator's sake.
TEST_F(CudaTensorParallel, QloraEqualsOneProcessAndRerunsBitIdentical) {
  expect_tensor_parallel_equals_one_process(
      {"lora.enabled=true", "lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "model.quantization=nf4",
       "model.hidden_size=128", "model.intermediate_size=128", "model.num_layers=1",
       "lora.targets=[q_proj, v_proj, down_proj]"},
      "QLoRA");
}

// Mixtral: the router whole on every rank, each expert's w1|w3 split by rows and w2 by
// columns, the routing, the sort by expert and the combine the same CUDA kernels on every
// tensor rank, the partial combine reduce-scattered over the NCCL tensor group.
const std::vector<std::string> kMixtral = {"model.num_experts=4", "model.experts_per_token=2",
                                           "model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001",
                                           "model.router_bias_update_rate=0.01"};

TEST_F(CudaTensorParallel, MixtralEqualsOneProcessAndRerunsBitIdentical) {
  expect_tensor_parallel_equals_one_process(kMixtral, "Mixtral");
}

// And with LoRA on every linear layer, the router and each expert's w1, w2, w3 included
// (dropout 0.1): the experts' adapters run over their sorted groups, numbered as one
// process numbers them, so the dropout kernel draws one process's masks.
TEST_F(CudaTensorParallel, MixtralWithLoraEqualsOneProcessAndRerunsBitIdentical) {
  std::vector<std::string> keys = kMixtral;
  keys.insert(keys.end(),
              {"lora.enabled=true", "lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "lora.targets=all-linear"});
  expect_tensor_parallel_equals_one_process(keys, "Mixtral LoRA");
}

}  // namespace
}  // namespace fsdp
