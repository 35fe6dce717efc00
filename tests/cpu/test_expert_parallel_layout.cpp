// parallel.expert as a config key (CONTRIBUTING "How to add a config key") and every layout
// it refuses, each a config error naming the key with its whole message: the model (dense,
// an expert count it does not divide) at load time; a model folder's experts once its
// config.json is read, and what is not built yet (with LoRA, on a GPU) at start-up; the
// launched world (the data-parallel ranks, the shard group, with parallel.tensor too) at
// start-up. Then the layout itself: the dispatch's arithmetic, and the expert units
// (param_units.h) holding every expert once over the expert ranks (under parallel.tensor,
// every expert's slices once over the expert x tensor ranks), numbered and initialised as
// one process's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/core/allocator.h"
#include "fsdp/model/activation_memory.h"
#include "fsdp/model/activations.h"
#include "fsdp/model/moe_dispatch.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/peft.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/setup.h"
#include "expert_parallel_start_up.h"
#include "test_util.h"

namespace fsdp {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    config::load_config_string(yaml, "configs/x.yaml", overrides);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

const std::vector<std::string> kMoe = {"model.preset=tiny_moe"};  // 8 experts, top-2

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ExpertParallelConfig, DefaultFileAndOverride) {
  EXPECT_EQ(config::Config{}.parallel.expert, 1);
  EXPECT_EQ(config::load_config_string("model:\n  preset: tiny_moe\nparallel:\n  expert: 2\n", "x").parallel.expert, 2);
  EXPECT_EQ(config::load_config_string("", "x", with(kMoe, {"parallel.expert=4"})).parallel.expert, 4);
  EXPECT_NE(config::dump_yaml(config::load_config_string("", "x", with(kMoe, {"parallel.expert=2"})))
                .find("parallel:\n  tensor: 1\n  expert: 2\n"),
            std::string::npos);
  EXPECT_NE(config::describe_keys().find("parallel.expert = 1  (integer)"), std::string::npos);
  EXPECT_EQ(error_of("parallel:\n  expert: 0\n"), "configs/x.yaml:2: key 'parallel.expert' must be >= 1, got 0");
}

TEST(ExpertParallelConfig, ModelsAndCombinationsThatCannotSplitAreRefusedNamingTheKey) {
  EXPECT_EQ(error_of("", with(kMoe, {"parallel.expert=8"})), "no error");
  EXPECT_EQ(error_of("", {"parallel.expert=2"}),
            "--set parallel.expert=2: key 'parallel.expert' is 2, which needs a mixture of experts (model.num_experts "
            "> 0): a dense model has no experts to spread; set parallel.expert: 1");
  EXPECT_EQ(error_of("", with(kMoe, {"parallel.expert=3"})),
            "--set parallel.expert=3: key 'parallel.expert' 3 must divide model.num_experts (8): every rank of the "
            "expert group holds the same number of whole experts");
  // The key set last is blamed, in its own words.
  EXPECT_EQ(error_of("parallel:\n  expert: 4\n", with(kMoe, {"model.num_experts=6"})),
            "--set model.num_experts=6: key 'model.num_experts' (6) must be a multiple of parallel.expert (4): every "
            "rank of the expert group holds the same number of whole experts");
}

dist::WorldInfo world_of(std::vector<int> node_of_rank) {
  dist::WorldInfo w;
  w.size = int(node_of_rank.size());
  w.node_of_rank = std::move(node_of_rank);
  return w;
}

std::string mesh_error(const std::vector<std::string>& overrides, const dist::WorldInfo& w) {
  try {
    train::check_mesh(config::load_config_string("", "configs/x.yaml", with(kMoe, overrides)), w);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ExpertParallelConfig, LayoutsTheWorldCannotHoldAreConfigErrors) {
  const dist::WorldInfo four = world_of({0, 0, 0, 0});
  EXPECT_EQ(mesh_error({"parallel.expert=4"}, four), "no error");
  EXPECT_EQ(train::mesh_spec(config::load_config_string("", "x", with(kMoe, {"parallel.expert=4"}))).expert, 4);
  EXPECT_EQ(mesh_error({"parallel.expert=2", "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"}, four),
            "no error");
  EXPECT_EQ(mesh_error({"parallel.expert=8"}, four),
            "--set parallel.expert=8: key 'parallel.expert' 8 must divide the 4 data-parallel ranks: the experts are "
            "spread over data-parallel ranks; use a divisor of 4");
  EXPECT_EQ(mesh_error({"parallel.expert=4", "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"}, four),
            "--set parallel.expert=4: key 'parallel.expert' 4 must divide the shard group of 2 data-parallel ranks "
            "(fsdp.sharding_strategy and fsdp.shard_group_size): the expert group is borrowed from the ranks that "
            "shard the other parameters; use a divisor of 2, or a HYBRID_SHARD fsdp.shard_group_size that is a "
            "multiple of 4");
  EXPECT_EQ(mesh_error({"parallel.expert=2", "fsdp.sharding_strategy=NO_SHARD"}, four),
            "--set parallel.expert=2: key 'parallel.expert' 2 must divide the shard group of 1 data-parallel rank "
            "(fsdp.sharding_strategy and fsdp.shard_group_size): the expert group is borrowed from the ranks that "
            "shard the other parameters; NO_SHARD has no shard group to borrow from: use FULL_SHARD, SHARD_GRAD_OP "
            "or HYBRID_SHARD");
  // With parallel.tensor the expert group is borrowed from the world / T data-parallel ranks.
  EXPECT_EQ(mesh_error({"parallel.expert=2", "parallel.tensor=2"}, four), "no error");
  EXPECT_EQ(mesh_error({"parallel.expert=4", "parallel.tensor=2"}, four),
            "--set parallel.expert=4: key 'parallel.expert' 4 must divide the 2 data-parallel ranks (world size 4 / "
            "parallel.tensor 2): the experts are spread over data-parallel ranks; use a divisor of 2");
  const dist::WorldInfo sixteen = world_of(std::vector<int>(16, 0));
  EXPECT_EQ(mesh_error({"parallel.expert=4", "parallel.tensor=2", "fsdp.sharding_strategy=HYBRID_SHARD",
                        "fsdp.shard_group_size=4"},
                       sixteen),
            "no error");
  EXPECT_EQ(mesh_error({"parallel.expert=4", "parallel.tensor=2", "fsdp.sharding_strategy=HYBRID_SHARD",
                        "fsdp.shard_group_size=2"},
                       sixteen),
            "--set parallel.expert=4: key 'parallel.expert' 4 must divide the shard group of 2 data-parallel ranks "
            "(fsdp.sharding_strategy and fsdp.shard_group_size): the expert group is borrowed from the ranks that "
            "shard the other parameters; use a divisor of 2, or a HYBRID_SHARD fsdp.shard_group_size that is a "
            "multiple of 4");
}

using test::expert_parallel_start_up;

TEST(ExpertParallelConfig, AModelFoldersExpertsAndWhatIsNotBuiltAreCheckedAtStartUp) {
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"parallel.expert=2"})), "expert_parallel 2");
  // With parallel.tensor each expert rank holds its experts' tensor slices (Note [Experts
  // under expert and tensor parallelism]).
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"parallel.expert=2", "parallel.tensor=2"}), Device::cpu(), 2),
            "expert_parallel 2");
  // LoRA on the experts is built (Note [LoRA on expert-parallel experts]), QLoRA too; not
  // under expert and tensor parallelism together yet.
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"lora.enabled=true", "parallel.expert=2"})), "expert_parallel 2");
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"lora.enabled=true", "model.quantization=nf4", "parallel.expert=2"})),
            "expert_parallel 2");
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"lora.enabled=true", "parallel.expert=2", "parallel.tensor=2"}),
                             Device::cpu(), 2),
            "--set parallel.expert=2: key 'parallel.expert' is 2 with parallel.tensor 2 and lora.enabled, but LoRA "
            "under expert and tensor parallelism together is not built yet: set parallel.expert or parallel.tensor "
            "to 1");
  // On GPUs too (the NCCL expert group; Note [Expert counts on a GPU]), but the drop runs
  // on the host: moe.capacity_factor stays the CPU's, with or without expert parallelism.
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"parallel.expert=2", "train.device=cuda"}), Device::cuda(0)),
            "expert_parallel 2");
  EXPECT_EQ(expert_parallel_start_up(with(kMoe, {"parallel.expert=2", "train.device=cuda", "moe.capacity_factor=1.25"}),
                             Device::cuda(0)),
            "--set moe.capacity_factor=1.25: key 'moe.capacity_factor' is 1.25, but token dropping on GPUs "
            "(train.device: cuda) is not built yet: set moe.capacity_factor: 0 (dropless)");
  // A model folder's expert count is known only once its config.json is read: Mixtral's
  // tiny golden folder has 4 experts (it must be even for E = 2: fine) ...
  const std::string folder = std::string(FSDP_SOURCE_DIR) + "/tests/golden/mixtral_tiny";
  EXPECT_EQ(expert_parallel_start_up({"model.init_from=" + folder, "parallel.expert=2", "train.seq_len=16"}),
            "expert_parallel 2");
  // ... and a dense folder has none.
  const std::string dense = std::string(FSDP_SOURCE_DIR) + "/tests/golden/llama_gqa_tiny";
  EXPECT_EQ(expert_parallel_start_up({"model.init_from=" + dense, "parallel.expert=2", "train.seq_len=16"}),
            "--set parallel.expert=2: key 'parallel.expert' 2 needs a mixture of experts (model.num_experts > 0): a "
            "dense model has no experts to spread (" +
                dense + "/config.json)");
}

TEST(ExpertParallelConfig, TheStepLineNamesTheMesh) {
  obs::StepMetrics m;
  m.world_size = 4;
  m.mesh = "1x2x2x1";
  m.expert_parallel = 2;
  EXPECT_NE(obs::format_step_line(m, 10).find(" | mesh 1x2x2x1 | comm "), std::string::npos)
      << obs::format_step_line(m, 10);
  // The all-to-alls' share of the wait, beside the most-loaded expert's.
  m.expert_load = {{3, 1}};
  m.expert_imbalance = {1.5};
  m.all_to_all_ms = 12.25;
  EXPECT_NE(obs::format_step_line(m, 10).find("expert load max/mean 1.50 (layer 0), all-to-all 12.2 ms"),
            std::string::npos)
      << obs::format_step_line(m, 10);
  EXPECT_NE(obs::to_json_line(m).find("\"all_to_all_ms\":12.25"), std::string::npos) << obs::to_json_line(m);
}

// 2 expert ranks of 4 experts: rank 0 holds experts 0-1, rank 1 experts 2-3.
TEST(ExpertDispatchLayout, SourceMajorStagingAndExpertMajorRuns) {
  // counts[src * 4 + e]: rank 0 routed 3, 1, 0, 2 pairs; rank 1 routed 1, 0, 4, 1.
  const std::vector<int64_t> counts = {3, 1, 0, 2, 1, 0, 4, 1};
  const model::DispatchLayout r0 = model::dispatch_layout(counts, 4, 0, 2);
  EXPECT_EQ(r0.send_rows, (std::vector<int64_t>{4, 2}));  // its experts 0-1, then rank 1's 2-3
  EXPECT_EQ(r0.recv_rows, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(r0.received, 5);
  // Staging: from rank 0 (expert 0: 3, expert 1: 1), from rank 1 (expert 0: 1, expert 1: 0).
  EXPECT_EQ(r0.block_rows, (std::vector<int64_t>{3, 1, 1, 0}));
  EXPECT_EQ(r0.block_staged, (std::vector<int64_t>{0, 3, 4, 5}));
  // Grouped: expert 0 (rank 0's 3 rows, then rank 1's 1), then expert 1 (rank 0's 1).
  EXPECT_EQ(r0.block_grouped, (std::vector<int64_t>{0, 4, 3, 5}));
  EXPECT_EQ(r0.expert_begin, (std::vector<int64_t>{0, 4, 5}));
  // Where each block starts in its source's sorted order: rank 0's expert 0 at 0, expert 1
  // at 3; rank 1's expert 0 at 0, expert 1 at 1 (how the source numbers those rows).
  EXPECT_EQ(r0.block_source, (std::vector<int64_t>{0, 3, 0, 1}));
  const model::DispatchLayout r1 = model::dispatch_layout(counts, 4, 1, 2);
  EXPECT_EQ(r1.send_rows, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(r1.recv_rows, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(r1.expert_begin, (std::vector<int64_t>{0, 4, 7}));
  // Experts 2-3: after rank 0's 3 + 1 pairs of experts 0-1, and rank 1's 1 + 0.
  EXPECT_EQ(r1.block_source, (std::vector<int64_t>{4, 4, 1, 5}));
  // What each rank sends is what the other receives.
  EXPECT_EQ(r0.send_rows[1], r1.recv_rows[0]);
  EXPECT_EQ(r1.send_rows[0], r0.recv_rows[1]);
}

model::LlamaConfig tiny_moe(int64_t expert) {
  model::LlamaConfig c = model::llama_preset("tiny_moe");
  c.num_layers = 2;
  c.expert_parallel = expert;
  return c;
}

// Every slot's seeded values (seed 7) in one process's units, by name.
std::map<std::string, std::vector<float>> seeded_values(const std::vector<model::UnitLayout>& one) {
  std::map<std::string, std::vector<float>> values;
  for (size_t u = 0; u < one.size(); ++u) {
    const Tensor flat = Tensor::zeros({one[u].numel}, DType::F32);
    model::init_unit(one[u], int(u), 7, 0.02, flat);
    for (const model::ParamSlot& s : one[u].params) {
      const Tensor v = flat.narrow(0, s.offset, s.numel);
      values[s.name].assign(v.data<float>(), v.data<float>() + s.numel);
    }
  }
  return values;
}

TEST(ExpertUnits, EveryExpertOnceNumberedAndInitialisedAsOneProcess) {
  const std::vector<model::UnitLayout> one = model::llama_units(tiny_moe(1));
  const std::map<std::string, std::vector<float>> want = seeded_values(one);
  for (int E : {2, 4, 8}) {
    std::map<std::string, int> seen;
    for (int r = 0; r < E; ++r) {
      const std::vector<model::UnitLayout> units = model::llama_units(tiny_moe(E), 0, r);
      ASSERT_EQ(units.size(), one.size() + 2) << "two expert units after the head";
      for (int l = 0; l < 2; ++l) {
        const model::UnitLayout& x = units[size_t(model::expert_unit(tiny_moe(E), l))];
        EXPECT_EQ(x.name, "layers." + std::to_string(l) + ".experts");
        EXPECT_EQ(x.experts_of, model::block_unit(l));
        // 8 / E experts: w1, w3 each, then w2 each, from expert r * 8 / E on.
        ASSERT_EQ(x.params.size(), size_t(3 * 8 / E));
        EXPECT_EQ(x.params.front().name, "layers." + std::to_string(l) + ".experts." + std::to_string(r * 8 / E) + ".w1");
        EXPECT_FALSE(units[size_t(model::block_unit(l))].has(x.params.front().name));
      }
      for (size_t u = 0; u < units.size(); ++u) {
        const Tensor flat = Tensor::zeros({units[u].numel}, DType::F32);
        model::init_unit(units[u], int(u), 7, 0.02, flat);
        for (const model::ParamSlot& s : units[u].params) {
          // Expert slots once over the ranks, the rest on every rank.
          ++seen[s.name];
          EXPECT_EQ(s.whole_offset, one[size_t(units[u].experts_of >= 0 ? units[u].experts_of : int(u))].slot(s.name).offset)
              << s.name;
          const Tensor v = flat.narrow(0, s.offset, s.numel);
          EXPECT_EQ(std::vector<float>(v.data<float>(), v.data<float>() + s.numel), want.at(s.name)) << s.name;
        }
      }
    }
    EXPECT_EQ(seen.size(), want.size());
    for (const auto& [name, count] : seen)
      EXPECT_EQ(count, name.find(".experts.") != std::string::npos ? 1 : E) << name << " at E=" << E;
  }
}

// LoRA's layout under expert parallelism (Note [LoRA on expert-parallel experts]): each
// expert's frozen w1, w3, w2 (dense or NF4) and its adapters live in its expert unit, the
// block keeps attention's; every adapter once over the ranks, numbered (whole_offset) and
// initialised as one process's, and each frozen expert weight is one process's slot.
TEST(ExpertUnits, LoraAdaptersLiveWithTheirExpertsNumberedAsOneProcess) {
  for (const model::Quantization q : {model::Quantization::None, model::Quantization::Nf4}) {
    model::PeftSpec peft;
    peft.lora.enabled = true;
    peft.lora.rank = 4;
    peft.lora.targets = {"all-linear"};
    peft.quantization = q;
    const std::vector<model::UnitLayout> one = model::lora_units(tiny_moe(1), peft);
    const std::map<std::string, std::vector<float>> want = seeded_values(one);
    for (int E : {2, 4}) {
      std::map<std::string, int> seen;
      for (int r = 0; r < E; ++r) {
        const std::vector<model::UnitLayout> units = model::lora_units(tiny_moe(E), peft, 0, r);
        ASSERT_EQ(units.size(), one.size() + 2);
        for (int l = 0; l < 2; ++l) {
          const model::UnitLayout& x = units[size_t(model::expert_unit(tiny_moe(E), l))];
          EXPECT_EQ(x.experts_of, model::block_unit(l));
          // 8 / E experts x (w1, w3, w2), frozen, each with lora_A and lora_B.
          EXPECT_EQ(x.frozen.size(), size_t(3 * 8 / E));
          EXPECT_EQ(x.params.size(), size_t(2 * 3 * 8 / E));
          for (const model::FrozenSlot& f : x.frozen) {
            const model::FrozenSlot& w = one[size_t(model::block_unit(l))].frozen_slot(f.name);
            EXPECT_EQ(f.format, w.format) << f.name;
            EXPECT_EQ(f.bytes, w.bytes) << f.name;
          }
          EXPECT_TRUE(units[size_t(model::block_unit(l))].has("layers." + std::to_string(l) + ".wq.lora_A"));
        }
        for (size_t u = 0; u < units.size(); ++u) {
          const Tensor flat = Tensor::zeros({units[u].numel}, DType::F32);
          model::init_unit(units[u], int(u), 7, 0.02, flat);
          const model::UnitLayout& w = one[size_t(units[u].experts_of >= 0 ? units[u].experts_of : int(u))];
          for (const model::ParamSlot& s : units[u].params) {
            ++seen[s.name];
            EXPECT_EQ(s.whole_offset, w.slot(s.name).offset) << s.name;
            const Tensor v = flat.narrow(0, s.offset, s.numel);
            EXPECT_EQ(std::vector<float>(v.data<float>(), v.data<float>() + s.numel), want.at(s.name)) << s.name;
          }
        }
      }
      EXPECT_EQ(seen.size(), want.size());
      for (const auto& [name, count] : seen)
        EXPECT_EQ(count, name.find(".experts.") != std::string::npos ? 1 : E) << name << " at E=" << E;
    }
  }
}

// E = 2 x T = 2 (Note [Experts under expert and tensor parallelism]): expert rank r, tensor
// rank t holds the t-th slices (w1|w3 rows, w2 columns) of experts [r n/E, (r+1) n/E), so
// every element of every expert is held once over the 4 ranks, every element of the
// block's split parameters (wq ... wo) once per expert rank, the replicated ones (norms,
// router) on every rank; each initialised as one process's, element for element.
TEST(ExpertUnits, UnderTensorParallelismEveryExpertSliceOnceAndInitialisedAsOneProcess) {
  const std::vector<model::UnitLayout> one = model::llama_units(tiny_moe(1));
  const std::map<std::string, std::vector<float>> want = seeded_values(one);
  constexpr int E = 2, T = 2;
  model::LlamaConfig c = tiny_moe(E);
  c.tensor_parallel = T;
  std::map<std::string, std::vector<int>> held;  // per whole element: how many ranks hold it
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < E; ++r) {
      const std::vector<model::UnitLayout> units = model::llama_units(c, t, r);
      ASSERT_EQ(units.size(), one.size() + 2);
      for (size_t u = 0; u < units.size(); ++u) {
        const Tensor flat = Tensor::zeros({units[u].numel}, DType::F32);
        model::init_unit(units[u], int(u), 7, 0.02, flat);
        for (const model::ParamSlot& s : units[u].params) {
          const bool expert = s.name.find(".experts.") != std::string::npos;
          EXPECT_EQ(expert, units[u].experts_of >= 0) << s.name << ": experts in the expert units alone";
          if (expert) EXPECT_EQ(s.tp.parts, T) << s.name << ": every expert matrix is split";
          std::vector<int>& h = held[s.name];
          h.resize(want.at(s.name).size(), 0);
          for (int64_t i = 0; i < s.numel; ++i) {
            const int64_t w = s.whole_index(i);
            ++h[size_t(w)];
            EXPECT_EQ(flat.get_flat(s.offset + i), want.at(s.name)[size_t(w)]) << s.name << " element " << w;
          }
        }
      }
    }
  }
  EXPECT_EQ(held.size(), want.size());
  for (const auto& [name, h] : held) {
    const bool expert = name.find(".experts.") != std::string::npos;
    const bool replicated = name.find("norm") != std::string::npos || name.ends_with(".router");
    const int times = expert ? 1 : replicated ? E * T : E;
    EXPECT_EQ(std::count(h.begin(), h.end(), times), int64_t(h.size())) << name << " held " << times << " times";
  }
}

TEST(ExpertParallelConfig, TheBinaryExitsTwoOnALayoutOneProcessCannotHold) {
  // One process is a world of one rank: parallel.expert 2 cannot start, and nothing runs.
  const test::CommandResult r =
      test::run_fsdp_train("train --config " + test::source_path("configs/tiny_moe.yaml") +
                               " --set data.source=synthetic --set parallel.expert=2 --set train.max_steps=1 --set "
                               "run.dir=/nonexistent/never",
                           "fsdp_ep_layout");
  const std::string& out = r.out;
  EXPECT_EQ(r.code, 2) << out;
  EXPECT_NE(out.find("--set parallel.expert=2: key 'parallel.expert' 2 must divide the 1 data-parallel ranks"),
            std::string::npos)
      << out;
}

// The plan's activations under expert parallelism are what the trainer allocates, to the
// byte: the expert side sized for the worst routing and the dispatch's two buffers
// (max_received_rows), in every checkpointing mode (activation_memory binds the same structs).
TEST(ExpertParallelMemory, ThePlansActivationsAreWhatIsAllocated) {
  model::LlamaConfig c = tiny_moe(1);
  using model::Recompute;
  // E = 2 x T = 2 last: each tensor rank dispatches all 22 rows of the micro-batch.
  for (const auto& [E, T] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
    c.expert_parallel = E;
    c.tensor_parallel = T;
    EXPECT_EQ(model::max_received_rows(c, 22), int64_t(E) * 22 * 2);  // min(k = 2, 8 / E) = 2
    for (const auto& [mode, offload] : {std::pair{Recompute::None, false}, std::pair{Recompute::Full, false},
                                        std::pair{Recompute::Selective, false}, std::pair{Recompute::Full, true}}) {
      model::ActivationCheckpointing policy;
      policy.mode = mode;
      policy.offload = offload;
      const size_t before = allocator_for(Device::cpu()).stats().current_bytes;
      const model::LlamaActivations act(c, 2, 11, DType::F32, Device::cpu(), policy);
      const size_t allocated = allocator_for(Device::cpu()).stats().current_bytes - before;
      EXPECT_EQ(model::activation_memory(c, 2, 11, DType::F32, policy).device(), double(allocated))
          << "E=" << E << " T=" << T << " mode " << int(mode) << (offload ? " offload" : "");
      EXPECT_TRUE(act.ep_staging.defined() && act.ep_staging.size(0) == model::max_received_rows(c, 22));
    }
  }
}

}  // namespace
}  // namespace fsdp
