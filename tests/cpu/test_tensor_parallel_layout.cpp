// parallel.tensor as a config key (CONTRIBUTING "How to add a config key") and every layout
// it refuses, each a config error naming the key with its whole message: the model's shape
// (heads, key/value heads, MLP width, vocabulary, sequence length) at load time, a model
// folder's shape once its config.json is read, and the launched world (world size, ranks
// per node, the shard group) at start-up; the binary exits 2 on one of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/setup.h"
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

TEST(TensorParallelConfig, DefaultFileAndOverride) {
  EXPECT_EQ(config::Config{}.parallel.tensor, 1);
  EXPECT_EQ(config::load_config_string("parallel:\n  tensor: 2\n", "x").parallel.tensor, 2);
  EXPECT_EQ(config::load_config_string("", "x", {"parallel.tensor=2"}).parallel.tensor, 2);
  EXPECT_NE(config::dump_yaml(config::load_config_string("", "x", {"parallel.tensor=2"})).find("parallel:\n  tensor: 2\n"),
            std::string::npos);
  EXPECT_NE(config::describe_keys().find("parallel.tensor = 1  (integer)"), std::string::npos);
  EXPECT_EQ(error_of("parallel:\n  tensor: 0\n"), "configs/x.yaml:2: key 'parallel.tensor' must be >= 1, got 0");
  EXPECT_EQ(error_of("parallel:\n  tensr: 2\n"),
            "configs/x.yaml:2: unknown key 'parallel.tensr' (did you mean 'parallel.tensor'?)");
}

// tiny: vocab 1024, hidden 128, MLP 352, 4 heads, 2 key/value heads; train.seq_len 128.
TEST(TensorParallelConfig, ShapesThatDoNotSplitAreRefusedNamingTheKey) {
  EXPECT_EQ(error_of("", {"parallel.tensor=2"}), "no error");
  EXPECT_EQ(error_of("", {"parallel.tensor=4"}),
            "--set parallel.tensor=4: key 'parallel.tensor' must divide model.num_kv_heads (2), got 4: each tensor "
            "rank computes whole key/value heads, so a GQA group stays on one rank (as torchtitan requires); tensor "
            "degrees that fit this model: 1, 2 (model.preset tiny with the model keys set)");
  EXPECT_EQ(error_of("", {"parallel.tensor=4", "model.num_kv_heads=4", "model.num_heads=8"}), "no error");
  EXPECT_EQ(error_of("", {"parallel.tensor=3"}),
            "--set parallel.tensor=3: key 'parallel.tensor' must divide model.num_heads (4), got 3: each tensor rank "
            "computes whole attention heads; tensor degrees that fit this model: 1, 2 (model.preset tiny with the "
            "model keys set)");
  EXPECT_EQ(error_of("", {"parallel.tensor=2", "model.intermediate_size=351"}),
            "--set parallel.tensor=2: key 'parallel.tensor' must divide model.intermediate_size (351), got 2: the "
            "MLP's gate, up and down projections are split over the tensor ranks; tensor degrees that fit this "
            "model: 1 (model.preset tiny with the model keys set)");
  EXPECT_EQ(error_of("", {"parallel.tensor=2", "model.vocab_size=1023"}),
            "--set parallel.tensor=2: key 'parallel.tensor' must divide model.vocab_size (1023), got 2: the "
            "embedding, the output head and the cross-entropy split the vocabulary evenly (no padding rows are "
            "added); tensor degrees that fit this model: 1 (model.preset tiny with the model keys set)");
  EXPECT_EQ(error_of("parallel:\n  tensor: 2\n", {"train.seq_len=127"}),
            "configs/x.yaml:2: key 'parallel.tensor' must divide train.seq_len (127), got 2: sequence parallelism "
            "splits each micro-batch's tokens over the tensor ranks; tensor degrees that fit this model: 1 "
            "(model.preset tiny with the model keys set)");
  EXPECT_EQ(error_of("", {"parallel.tensor=2", "model.num_experts=4", "model.experts_per_token=2",
                          "model.intermediate_size=175"}),
            "--set parallel.tensor=2: key 'parallel.tensor' must divide model.intermediate_size (175), got 2: each "
            "expert's gate, up and down projections are split over the tensor ranks; tensor degrees that fit this "
            "model: 1 (model.preset tiny with the model keys set)");
}

TEST(TensorParallelConfig, AModelFoldersShapeIsCheckedWhenItIsRead) {
  // llama_gqa_tiny: 6 heads, 2 key/value heads; the shape is known only from its config.json.
  const std::string folder = std::string(FSDP_SOURCE_DIR) + "/tests/golden/llama_gqa_tiny";
  const config::Config ok =
      config::load_config_string("", "x", {"model.init_from=" + folder, "parallel.tensor=2", "train.seq_len=32"});
  EXPECT_EQ(config::training_model_config(ok).num_kv_heads, 2);
  const config::Config bad =
      config::load_config_string("", "x", {"model.init_from=" + folder, "parallel.tensor=3", "train.seq_len=30"});
  try {
    config::training_model_config(bad);
    FAIL() << "expected an error";
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--set parallel.tensor=3: key 'parallel.tensor' must divide model.num_kv_heads (2), got 3: each tensor "
              "rank computes whole key/value heads, so a GQA group stays on one rank (as torchtitan requires); tensor "
              "degrees that fit this model: 1, 2 (" +
                  folder + "/config.json)");
  }
}

dist::WorldInfo world_of(std::vector<int> node_of_rank) {
  dist::WorldInfo w;
  w.size = int(node_of_rank.size());
  w.node_of_rank = std::move(node_of_rank);
  return w;
}

std::string mesh_error(const std::vector<std::string>& overrides, const dist::WorldInfo& w) {
  try {
    train::check_mesh(config::load_config_string("", "configs/x.yaml", overrides), w);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TensorParallelConfig, LayoutsTheWorldCannotHoldAreConfigErrors) {
  const dist::WorldInfo four = world_of({0, 0, 0, 0});
  EXPECT_EQ(mesh_error({"parallel.tensor=2"}, four), "no error");
  EXPECT_EQ(mesh_error({"parallel.tensor=2", "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=2"}, four),
            "no error");
  EXPECT_EQ(train::mesh_spec(config::load_config_string("", "x", {"parallel.tensor=2"})).tensor, 2);
  EXPECT_EQ(mesh_error({"parallel.tensor=2"}, world_of({0, 0, 0})),
            "--set parallel.tensor=2: key 'parallel.tensor' 2 must divide the world size (3 ranks): the world is made "
            "of whole tensor groups; use a divisor of 3");
  EXPECT_EQ(mesh_error({"parallel.tensor=2"}, world_of({0, 0, 0, 1, 1, 1})),
            "--set parallel.tensor=2: key 'parallel.tensor' 2 must divide the ranks of every node, but node 0 runs 3: "
            "a tensor group stays inside one node (its collectives are on the critical path of every layer); run a "
            "multiple of 2 ranks per node");
  EXPECT_EQ(mesh_error({"parallel.tensor=2", "fsdp.sharding_strategy=HYBRID_SHARD", "fsdp.shard_group_size=4"}, four),
            "--set fsdp.shard_group_size=4: key 'fsdp.shard_group_size' is 4, which does not divide the 2 "
            "data-parallel ranks (world size 4 / parallel.tensor 2): HYBRID_SHARD shards over groups of that many "
            "ranks and replicates across them; use a divisor of 2, or 0 for the ranks of one node");
  // What `plan --ranks` judges without a node map: the same rules from the ranks per node.
  const config::Config t2 = config::load_config_string("", "configs/x.yaml", {"parallel.tensor=2"});
  EXPECT_EQ(config::checked_shard_group(t2, 8, 8), 4);
  try {
    config::checked_shard_group(t2, 6, 3);
    ADD_FAILURE() << "expected an error";
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--set parallel.tensor=2: key 'parallel.tensor' 2 must divide the ranks of every node (3 per node): a "
              "tensor group stays inside one node (its collectives are on the critical path of every layer); run a "
              "multiple of 2 ranks per node");
  }
}

// What tensor parallelism cannot run is refused where the model is made for a rank of a
// mesh with T > 1 (train::rank_model_config), naming parallel.tensor: QLoRA whose slices
// would cut NF4 blocks. Everything else runs on the CPU and on GPUs alike
// (tests/cuda_mpi/test_tensor_parallel_cuda.cpp: dense, LoRA, QLoRA and Mixtral).
std::string rank_model_error(const std::vector<std::string>& overrides) {
  dist::ProcessGroups g = dist::local_process_groups();
  dist::MeshShape shape;
  shape.tensor = 2;
  g.mesh = dist::DeviceMesh(shape, {0, 0});
  try {
    const model::LlamaConfig m =
        train::rank_model_config(config::load_config_string("", "configs/x.yaml", overrides), g);
    return "tensor_parallel " + std::to_string(m.tensor_parallel);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
}

TEST(TensorParallelConfig, WhatCannotRunIsRefusedNamingTheKey) {
  EXPECT_EQ(rank_model_error({"parallel.tensor=2"}), "tensor_parallel 2");
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear"}),
            "tensor_parallel 2");
  // QLoRA runs where every rank's NF4 blocks are blocks of the whole weight (See Note [LoRA
  // under tensor parallelism]); tiny's down_proj, 352 wide, would cut them.
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear",
                              "model.quantization=nf4", "model.intermediate_size=384"}),
            "tensor_parallel 2");
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear",
                              "model.quantization=nf4"}),
            "--set parallel.tensor=2: key 'parallel.tensor' is 2 with model.quantization nf4, but layers.0.w_down "
            "(model.layers.0.mlp.down_proj.weight, [128, 352]) splits into 176 columns per tensor rank, not a "
            "multiple of the NF4 block size 64: each rank's NF4 blocks must be blocks of the weight quantized whole "
            "(a parallel.tensor that leaves a multiple of 64 fits)");
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "model.num_experts=4", "model.experts_per_token=2"}),
            "tensor_parallel 2");
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "model.num_experts=4", "model.experts_per_token=2",
                              "train.device=cuda"}),
            "tensor_parallel 2");
  EXPECT_EQ(rank_model_error({"parallel.tensor=2", "train.device=cuda"}), "tensor_parallel 2");
}

TEST(TensorParallelConfig, TheStepLineAndMetricsNameTheMesh) {
  obs::StepMetrics m;
  m.world_size = 4;
  m.mesh = "1x2x2";
  m.tensor_parallel = 2;
  EXPECT_NE(obs::format_step_line(m, 10).find(" | mesh 1x2x2 | comm "), std::string::npos) << obs::format_step_line(m, 10);
  EXPECT_NE(obs::to_json_line(m).find("\"world_size\":4,\"mesh\":\"1x2x2\""), std::string::npos) << obs::to_json_line(m);
  // FSDP alone: the line as before, the mesh in metrics.jsonl.
  m.mesh = "1x4x1";
  m.tensor_parallel = 1;
  EXPECT_EQ(obs::format_step_line(m, 10).find(" | mesh"), std::string::npos);
  EXPECT_NE(obs::to_json_line(m).find("\"mesh\":\"1x4x1\""), std::string::npos);
}

TEST(TensorParallelConfig, TheBinaryExitsTwoOnALayoutOneProcessCannotHold) {
  // One process is a world of one rank: parallel.tensor 2 cannot start, and nothing runs.
  const test::CommandResult r =
      test::run_fsdp_train("train --config " + test::source_path("configs/tiny.yaml") +
                               " --set data.source=synthetic --set parallel.tensor=2 --set train.max_steps=1 --set "
                               "run.dir=/nonexistent/never",
                           "fsdp_tp_layout");
  const std::string& out = r.out;
  EXPECT_EQ(r.code, 2) << out;
  EXPECT_NE(out.find("--set parallel.tensor=2: key 'parallel.tensor' 2 must divide the world size (1 ranks)"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace fsdp
