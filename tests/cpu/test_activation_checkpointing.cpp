// Activation checkpointing (train.activation_checkpointing, model/activations.h): under full
// a checkpointed block keeps only its input and runs its forward again inside its backward;
// under selective it also keeps its GEMM and attention outputs and recomputes only the
// norms, SwiGLU and the MoE gathers; with offloading what it keeps waits in a host arena.
// Recompute is deterministic, so losses and every gradient are the same bits as keeping
// every activation — for Llama and for a mixture of experts (whose router statistics must
// survive the shared scratch), every block, every 2nd or every 3rd, over accumulated
// micro-batches — and the activations take less memory: full < selective < none.
#include <gtest/gtest.h>

#include <cstring>

#include "fsdp/core/allocator.h"
#include "fsdp/core/copy_stream.h"
#include "fsdp/model/activation_memory.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/param_init.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/train/trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

model::LlamaConfig small(bool moe) {
  model::LlamaConfig c{61, 32, 24, 4, 4, 2, 16, 10000.0, 1e-5};
  if (moe) {
    c.num_experts = 4;
    c.experts_per_token = 2;
    c.router_aux_loss_coef = 0.1;
    c.router_z_loss_coef = 0.01;
  }
  return c;
}

struct AcRun {
  std::vector<model::LossSum> losses;
  std::vector<Tensor> grads;
  size_t activation_bytes = 0;  // on the "device" (the CPU allocator)
  size_t host_arena_bytes = 0;  // offloaded copies
};

model::ActivationCheckpointing ac(model::Recompute mode, int every = 1, bool offload = false, int horizon = 2) {
  model::ActivationCheckpointing a;
  a.mode = mode;
  a.every = every;
  a.offload = offload;
  a.offload_horizon = horizon;
  return a;
}

AcRun run(const model::LlamaConfig& c, const model::ActivationCheckpointing& policy) {
  model::Llama llama(c);
  model::LocalParams params(llama.units());
  for (int u = 0; u < params.num_units(); ++u) model::init_unit(llama.units()[size_t(u)], u, 5, 0.3, params.params(u));
  const size_t before = allocator_for(Device::cpu()).stats().current_bytes;
  const size_t host_before = CopyStream::host_stats().current_bytes;
  model::LlamaActivations act(c, 2, 11, DType::F32, Device::cpu(), policy);
  AcRun r;
  r.activation_bytes = allocator_for(Device::cpu()).stats().current_bytes - before;
  r.host_arena_bytes = CopyStream::host_stats().current_bytes - host_before;
  // The memory plan's activation side adds up the same buffers without allocating them.
  const model::ActivationMemory plan = model::activation_memory(c, 2, 11, DType::F32, policy);
  EXPECT_EQ(plan.device(), double(r.activation_bytes));
  EXPECT_EQ(plan.host, double(r.host_arena_bytes));
  for (int micro = 0; micro < 2; ++micro) {  // the second accumulates into the same gradients
    for (int64_t i = 0; i < 22; ++i) {
      act.ids.set({i}, double((i * 7 + micro * 13 + 1) % c.vocab_size));
      act.targets.set({i}, i % 6 == 5 ? double(kIgnoreIndex) : double((i * 11 + micro) % c.vocab_size));
    }
    r.losses.push_back(llama.forward_backward(act, params, 0.05, 0.5));
  }
  for (int u = 0; u < params.num_units(); ++u) r.grads.push_back(params.grads(u).clone());
  return r;
}

void expect_same_bits(const AcRun& got, const AcRun& want, const std::string& what) {
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_EQ(got.losses[i].sum, want.losses[i].sum) << what;
    EXPECT_EQ(got.losses[i].router_aux, want.losses[i].router_aux) << what;
    EXPECT_EQ(got.losses[i].router_z, want.losses[i].router_z) << what;
  }
  for (size_t u = 0; u < want.grads.size(); ++u)
    EXPECT_EQ(std::memcmp(got.grads[u].data_ptr(), want.grads[u].data_ptr(), want.grads[u].nbytes()), 0)
        << what << ": unit " << u << " gradients differ";
}

TEST(ActivationCheckpointing, EveryModeIsBitIdenticalAndSmallerForLlamaAndMoe) {
  using model::Recompute;
  for (bool moe : {false, true}) {
    const model::LlamaConfig c = small(moe);
    const AcRun none = run(c, ac(Recompute::None));
    EXPECT_GT(none.losses[0].sum, 0.0);
    if (moe) EXPECT_GT(none.losses[0].router_aux, 0.0);
    for (int every : {1, 2, 3}) {
      const std::string what = std::string(moe ? "moe" : "llama") + " every " + std::to_string(every);
      const AcRun full = run(c, ac(Recompute::Full, every));
      const AcRun selective = run(c, ac(Recompute::Selective, every));
      expect_same_bits(full, none, "full " + what);
      expect_same_bits(selective, none, "selective " + what);
      EXPECT_LT(full.activation_bytes, selective.activation_bytes) << what;
      EXPECT_LT(selective.activation_bytes, none.activation_bytes) << what;
    }
    // Every block checkpointed: one block's activations instead of four.
    const AcRun all = run(c, ac(Recompute::Full));
    EXPECT_LT(double(all.activation_bytes), 0.75 * double(none.activation_bytes)) << (moe ? "moe" : "llama");
  }
}

// Offloading: six checkpointed blocks, max(horizon + 1, 3) slots on the device, every
// block's kept tensors in the host arena; the same bits for each horizon, mode and every.
TEST(ActivationCheckpointing, OffloadIsBitIdenticalAndMovesKeptTensorsToTheHostArena) {
  using model::Recompute;
  for (bool moe : {false, true}) {
    model::LlamaConfig c = small(moe);
    c.num_layers = 6;
    const AcRun none = run(c, ac(Recompute::None));
    for (Recompute mode : {Recompute::Full, Recompute::Selective}) {
      for (int every : {1, 2}) {
        const AcRun kept = run(c, ac(mode, every));
        EXPECT_EQ(kept.host_arena_bytes, 0u);
        for (int horizon : {1, 2, 3}) {
          const std::string what = std::string(moe ? "moe " : "llama ") +
                                   (mode == Recompute::Full ? "full" : "selective") + " every " +
                                   std::to_string(every) + " horizon " + std::to_string(horizon);
          const AcRun off = run(c, ac(mode, every, true, horizon));
          expect_same_bits(off, none, what);
          const int64_t blocks = 6 / every, slots = std::min<int64_t>(blocks, std::max(horizon + 1, 3));
          // What one checkpointed block keeps: its input, and under selective its Expensive tensors.
          const double per_block = double(off.host_arena_bytes) / double(blocks);
          EXPECT_GT(per_block, 0.0) << what;
          // The device holds `slots` of them (and a [N, C] recompute output) instead of every block's.
          const double expected = double(kept.activation_bytes) - double(blocks - slots) * per_block + 22 * 32 * 4;
          EXPECT_EQ(double(off.activation_bytes), expected) << what;
        }
      }
    }
  }
}

TEST(ActivationCheckpointing, TrainerStepsAreBitIdentical) {
  auto steps = [](const std::string& ac, bool offload = false) {
    auto groups = dist::local_process_groups();
    train::Trainer t(config::load_config_string("data:\n  source: synthetic\n", "test",
                                                {"model.preset=tiny_moe", "model.num_layers=3", "model.hidden_size=32",
                                                 "model.intermediate_size=24", "model.vocab_size=97",
                                                 "model.num_heads=4", "model.num_kv_heads=2", "train.seq_len=16",
                                                 "train.micro_batch_size=2", "train.grad_accum_steps=2",
                                                 "logging.metrics=false", "checkpoint.resume=none",
                                                 "train.activation_checkpointing=" + ac,
                                                 std::string("train.activation_offload=") + (offload ? "true" : "false"),
                                                 "train.activation_offload_horizon=1"}),
                     groups);
    std::vector<double> losses;
    for (int i = 0; i < 4; ++i) losses.push_back(t.train_step().loss);
    std::vector<float> params;
    for (int u = 0; u < t.engine().num_units(); ++u) {
      const Tensor& m = t.engine().master(u);
      params.insert(params.end(), m.data<float>(), m.data<float>() + m.numel());
    }
    return std::make_pair(losses, params);
  };
  const auto none = steps("none");
  for (const char* mode : {"full", "selective"}) {
    for (bool offload : {false, true}) {
      const auto got = steps(mode, offload);
      EXPECT_EQ(got.first, none.first) << mode << " offload " << offload;
      EXPECT_EQ(got.second, none.second) << mode << " offload " << offload;
    }
  }
}

}  // namespace
}  // namespace fsdp
