// The memory plan (fsdp/plan/memory_plan.h): its arithmetic on shapes no machine holds
// (no overflow, no allocation), its answers (largest micro-batch, fewest ranks), the
// shipped configs fitting 80 GB GPUs as their sbatch scripts launch them, byte sizes, the
// trainer's refusal, and `fsdp_train plan` / `train` refusing what cannot fit (a hidden
// size of 1e9, a billion layers in a Hugging Face config.json, a 1.3B model under an 8 GB
// `ulimit -v`), each with one line naming the key and the bytes. tests/mpi/test_memory_plan.cpp
// holds the plan to the allocator's measured peak. LoRA and QLoRA: the seed config plans
// its frozen NF4 base and adapters and fits its job, and a LoRA trainer's activations and
// adapter scratch are the plan's, byte for byte, under every checkpointing mode.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fsdp/config/model_options.h"
#include "fsdp/core/allocator.h"
#include "fsdp/plan/host_memory.h"
#include "fsdp/plan/memory_check.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/train/setup.h"
#include "fsdp/train/trainer.h"
#include "memory_plan_checks.h"
#include "test_util.h"

namespace fsdp {
namespace {

config::Config load(const std::vector<std::string>& o, const std::string& file = "") {
  return file.empty() ? config::load_config_string("data:\n  source: synthetic\n", "test", o) : config::load_config(test::source_path(file), o);
}

plan::PlanTarget gpus(int ranks, double bytes = 80e9) { return test::plan_target(ranks, 8, true, bytes); }

double row(const plan::MemoryPlan& p, const std::string& name) { return test::plan_row(p, name); }

// A Hugging Face folder holding only the tiny preset's config.json with `layers` layers.
std::string hf_folder(const std::string& name, int64_t layers) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": )"
                                     << layers << R"(, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-5})";
  return dir.string();
}

// The config refuses such shapes (model::ShapeLimits); the plan's arithmetic must not
// overflow or allocate even so, so the shape is set past the config here.
TEST(MemoryPlan, AbsurdShapesGiveFiniteNumbersWithoutOverflowOrAllocation) {
  const config::Config cfg = load({"model.num_heads=1", "model.num_kv_heads=1"});
  model::LlamaConfig m = config::training_model_config(cfg);
  m.hidden_size = 2000000000, m.num_layers = 2000000000, m.vocab_size = 2000000000;
  const auto t0 = std::chrono::steady_clock::now();
  const plan::MemoryPlan p = plan::plan_memory(cfg, m, gpus(1 << 20));
  EXPECT_TRUE(std::isfinite(p.peak));
  EXPECT_GT(p.peak, 4e23);  // 16 bytes x 3.2e28 parameters / 2^20 ranks
  EXPECT_FALSE(p.fits());
  EXPECT_FALSE(plan::largest_micro_batch(cfg, m, gpus(8)));
  EXPECT_FALSE(plan::fewest_ranks(cfg, m, gpus(8), "full"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(MemoryPlan, ModesOrderAndOffloadMovesBytesToTheHost) {
  auto plan = [](const std::string& mode, bool offload) {
    const config::Config cfg = load({"train.activation_checkpointing=" + mode,
                                     std::string("train.activation_offload=") + (offload ? "true" : "false"),
                                     "train.dtype=bfloat16", "fsdp.param_dtype=bfloat16"},
                                    "configs/llama2_70b.yaml");
    return plan::plan_memory(cfg, config::training_model_config(cfg), gpus(64));
  };
  const double none = row(plan("none", false), "saved activations");
  const double selective = row(plan("selective", false), "saved activations");
  const double full = row(plan("full", false), "saved activations");
  EXPECT_LT(full, selective);
  EXPECT_LT(selective, none);
  // Llama 2 70B at 4096 tokens: ~137K bf16 values per token per layer kept (the issue's ~1.1 GB per layer).
  EXPECT_NEAR(none / 80 / 4096 / 2, 137e3, 10e3);
  const plan::MemoryPlan off = plan("full", true);
  EXPECT_LT(row(off, "saved activations"), full);
  ASSERT_EQ(off.host.size(), 1u);
  EXPECT_NEAR(off.host[0].bytes, 80.0 * 4096 * 8192 * 2, 1.0);  // every block's input, in page-locked memory
}

TEST(MemoryPlan, LargestMicroBatchIsTheEdgeOfFitting) {
  const config::Config cfg = load({}, "configs/llama2_70b.yaml");
  const model::LlamaConfig m = config::training_model_config(cfg);
  const auto b = plan::largest_micro_batch(cfg, m, gpus(64));
  ASSERT_TRUE(b);
  config::Config c = cfg;
  c.train.micro_batch_size = *b;
  EXPECT_TRUE(plan::plan_memory(c, m, gpus(64)).fits());
  c.train.micro_batch_size = *b + 1;
  EXPECT_FALSE(plan::plan_memory(c, m, gpus(64)).fits());
  const auto n = plan::fewest_ranks(cfg, m, gpus(64), "full");
  ASSERT_TRUE(n);
  EXPECT_TRUE(plan::plan_memory(cfg, m, gpus(*n)).fits());
  EXPECT_FALSE(plan::plan_memory(cfg, m, gpus(*n - 8)).fits());  // whole nodes past the first
}

// The presets as their sbatch scripts launch them (nodes x 8 GPUs of 80 GB) fit.
TEST(MemoryPlan, ShippedConfigsFitTheirJobs) {
  for (const auto& [file, ranks] : std::vector<std::pair<std::string, int>>{{"configs/llama2_7b.yaml", 32},
                                                                           {"configs/llama2_13b.yaml", 32},
                                                                           {"configs/llama2_70b.yaml", 64},
                                                                           {"configs/llama2_70b_tp.yaml", 64},
                                                                           {"configs/mixtral_8x7b.yaml", 32},
                                                                           {"configs/mixtral_8x7b_tp.yaml", 32},
                                                                           {"configs/mixtral_8x7b_ep.yaml", 32}}) {
    const config::Config cfg = load({}, file);
    const plan::MemoryPlan p = plan::plan_memory(cfg, config::training_model_config(cfg), gpus(ranks));
    EXPECT_TRUE(p.fits()) << file << "\n" << plan::format_plan(p);
  }
}

// PyTorch's HYBRID_SHARD is FULL_SHARD within the shard group: on 4 nodes of 8 its plan is
// FULL_SHARD's on one node of 8, row for row; HYBRID_SHARD_ZERO2 (PyTorch's
// _HYBRID_SHARD_ZERO2) is SHARD_GRAD_OP's, every block gathered from its forward to its
// backward: more gathered units in flight than resharding after forward keeps.
TEST(MemoryPlan, HybridStrategiesPlanAsTheirStrategyWithinTheGroup) {
  auto plan = [](const std::string& strategy, int ranks) {
    const config::Config cfg = load({"fsdp.sharding_strategy=" + strategy}, "configs/llama2_13b.yaml");
    return plan::plan_memory(cfg, config::training_model_config(cfg), gpus(ranks));
  };
  auto expect_same_rows = [](const plan::MemoryPlan& a, const plan::MemoryPlan& b, const std::string& what) {
    ASSERT_EQ(a.rows.size(), b.rows.size()) << what;
    for (size_t i = 0; i < a.rows.size(); ++i) {
      EXPECT_EQ(a.rows[i].name, b.rows[i].name) << what;
      EXPECT_EQ(a.rows[i].bytes, b.rows[i].bytes) << what << ": " << a.rows[i].name;
    }
    EXPECT_EQ(a.peak, b.peak) << what;
  };
  const plan::MemoryPlan hybrid = plan("HYBRID_SHARD", 32), zero2 = plan("HYBRID_SHARD_ZERO2", 32);
  expect_same_rows(hybrid, plan("FULL_SHARD", 8), "HYBRID_SHARD vs FULL_SHARD");
  expect_same_rows(zero2, plan("SHARD_GRAD_OP", 8), "HYBRID_SHARD_ZERO2 vs SHARD_GRAD_OP");
  const double block = row(hybrid, "gathered units in flight");
  EXPECT_GT(block, 0);
  // 43 buffers of one block (every block kept, and the prefetched ones) against 5 in flight.
  EXPECT_GT(row(zero2, "gathered units in flight"), 8 * block);
  EXPECT_LT(hybrid.peak, zero2.peak);
  // A HYBRID_SHARD_ZERO2 run that does not fit is told HYBRID_SHARD first (13B without
  // checkpointing: 88 GiB under ZERO2, 64 GiB resharded), before recomputing activations.
  const config::Config none = load({"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2", "train.activation_checkpointing=none"},
                                   "configs/llama2_13b.yaml");
  const model::LlamaConfig m = config::training_model_config(none);
  const plan::MemoryPlan over = plan::plan_memory(none, m, gpus(32));
  ASSERT_FALSE(over.fits()) << plan::format_plan(over);
  EXPECT_NE(plan::advise(none, m, over).find("fsdp.sharding_strategy: HYBRID_SHARD (resharded after forward"),
            std::string::npos)
      << plan::advise(none, m, over);
}

TEST(MemoryPlan, RefusesUnlessOversubscriptionIsAllowed) {
  const config::Config cfg = load({"train.micro_batch_size=64"}, "configs/llama2_70b.yaml");
  try {
    plan::check_memory(cfg, gpus(64), false);
    ADD_FAILURE() << "no error";
  } catch (const config::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("over by"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.micro_batch_size 5 fits (the largest)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.allow_oversubscribe"), std::string::npos) << msg;
  }
  config::Config allowed = cfg;
  allowed.train.allow_oversubscribe = true;
  EXPECT_FALSE(plan::check_memory(allowed, gpus(64), false).fits());
}

// parallel.tensor in the plan: one rank's slices over the data-parallel ranks (the
// whole model's parameter count unchanged), activations and gathered units over the tensor
// group; and, for a run that cannot fit otherwise, a tensor degree among the answers.
// (That the figures are what the trainer allocates: tests/mpi/test_memory_plan.cpp's T=2 cases.)
TEST(MemoryPlan, TensorParallelismSplitsActivationsAndGatheredUnitsAndIsProposed) {
  const config::Config one = load({"train.activation_checkpointing=full", "train.activation_offload=true"},
                                  "configs/llama2_70b.yaml");
  config::Config t8 = one;
  t8.parallel.tensor = 8;
  const model::LlamaConfig m = config::training_model_config(one);
  const plan::MemoryPlan a = plan::plan_memory(one, m, gpus(512)), b = plan::plan_memory(t8, m, gpus(512));
  EXPECT_EQ(a.parameters, b.parameters);
  // FULL_SHARD over 512 ranks, or over 64 data-parallel ranks of 1/8 of every matrix: the
  // same state per rank but for the norms each tensor rank keeps whole.
  EXPECT_NEAR(row(b, "fp32 master weights (shards)") / row(a, "fp32 master weights (shards)"), 1.0, 1e-3);
  EXPECT_NEAR(row(b, "saved activations") / row(a, "saved activations"), 1.0 / 8, 1e-3);
  EXPECT_NEAR(row(b, "gathered units in flight") / row(a, "gathered units in flight"), 1.0 / 8, 1e-2);
  const plan::MemoryPlan tight = plan::plan_memory(one, m, gpus(512, 12e9));
  ASSERT_FALSE(tight.fits());
  EXPECT_NE(plan::advise(one, m, tight).find("parallel.tensor: 2 (tensor parallelism over 2 ranks of a node) makes it "
                                             "fit"),
            std::string::npos)
      << plan::advise(one, m, tight);
  // Counts of ranks that are not whole tensor groups are never proposed.
  const auto n = plan::fewest_ranks(t8, m, gpus(512), "full");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n % 8, 0);
  // Every model runs under tensor parallelism on GPUs: Mixtral 8x7B on 64 GPUs of 20 GB,
  // already fully checkpointed and offloaded (30.1 GiB per rank), fits with a node's 8.
  const config::Config moe = load({"train.activation_offload=true"}, "configs/mixtral_8x7b.yaml");
  const model::LlamaConfig mm = config::training_model_config(moe);
  const plan::MemoryPlan moe_tight = plan::plan_memory(moe, mm, gpus(64, 20e9));
  ASSERT_FALSE(moe_tight.fits());
  EXPECT_NE(plan::advise(moe, mm, moe_tight).find("parallel.tensor: 8 (tensor parallelism over 8 ranks of a node) "
                                                  "makes it fit"),
            std::string::npos)
      << plan::advise(moe, mm, moe_tight);
  // QLoRA only at a degree whose slices are whole NF4 blocks: Llama 2 7B's MLP, 11008 wide,
  // splits into 64-multiples over 2 and 4 ranks, not over 8 (1376), which would save the most.
  const config::Config q = load({"train.activation_checkpointing=full", "train.activation_offload=true",
                                 "lora.enabled=true", "lora.rank=16", "lora.targets=all-linear",
                                 "model.quantization=nf4"},
                                "configs/llama2_7b.yaml");
  const model::LlamaConfig qm = config::training_model_config(q);
  const plan::MemoryPlan q_tight = plan::plan_memory(q, qm, gpus(8, 3e9));
  ASSERT_FALSE(q_tight.fits());
  const std::string q_advice = plan::advise(q, qm, q_tight);
  EXPECT_NE(q_advice.find("the one that saves the most is parallel.tensor: 4"), std::string::npos) << q_advice;
  EXPECT_EQ(q_advice.find("parallel.tensor: 8"), std::string::npos) << q_advice;
}

TEST(MemoryPlan, ParsesSizesAndRefusesTheRest) {
  EXPECT_EQ(plan::parse_bytes("80GB", "x"), 80e9);
  EXPECT_EQ(plan::parse_bytes("80 GiB", "x"), 80.0 * (1ull << 30));
  EXPECT_EQ(plan::parse_bytes("512MiB", "x"), 512.0 * (1 << 20));
  EXPECT_EQ(plan::parse_bytes("8e9B", "x"), 8e9);
  EXPECT_EQ(plan::parse_bytes("1.5T", "x"), 1.5 * (1ull << 40));
  // "80" meant 80 bytes (issue 31): a size says its unit.
  for (const char* bad : {"", "lots", "80XB", "-5GB", "0", "80GB extra", "nan", "1e400", "80", "8e9"})
    test::expect_error([&] { plan::parse_bytes(bad, "--device-memory"); }, {"--device-memory", "is not a size"});
  const plan::HostMemory host = plan::host_memory_limit();
  EXPECT_GT(host.bytes, 1e8);
  EXPECT_FALSE(host.source.empty());
}

// The adapters keep nothing of their own for backward (lora_adapter.h recomputes them from
// the Linear's input, which the blocks' bind() lists keep), so a LoRA run's activations are
// the plan's under every mode, and the one scratch the adapters and NF4 weights share is its
// own row: both equal, byte for byte, what the trainer allocated by the end of a step.
TEST(MemoryPlan, LoraActivationsAndScratchAreWhatTheTrainerAllocates) {
  const std::vector<std::vector<std::string>> modes = {
      {"train.activation_checkpointing=none"},
      {"train.activation_checkpointing=selective"},
      {"train.activation_checkpointing=full", "train.activation_offload=true"}};
  for (const char* quant : {"none", "nf4"}) {
    for (std::vector<std::string> o : modes) {
      const std::string what = std::string(quant) + " " + o[0];
      o.insert(o.end(), {"model.preset=tiny", "model.num_layers=3", "train.seq_len=32", "train.micro_batch_size=2",
                         "logging.metrics=false", "checkpoint.resume=none", "data.num_workers=0",
                         "run.dir=/tmp/fsdp_plan_lora", "lora.enabled=true", "lora.rank=4", "lora.targets=all-linear",
                         "lora.dropout=0.1", std::string("model.quantization=") + quant});
      auto groups = dist::local_process_groups();
      train::Trainer t(load(o), groups);
      t.train_step();
      double activations = 0, scratch = 0;
      for (const MemorySnapshot::Entry& e : allocator_for(Device::cpu()).snapshot().categories) {
        const std::string name = memory::category_name(e.category);
        if (name.starts_with("activations/") || name == "scratch/activation recompute") activations += double(e.bytes);
        if (name == "scratch/lora and nf4") scratch += double(e.bytes);
      }
      const plan::MemoryPlan& p = t.memory_plan();
      EXPECT_EQ(activations, row(p, "saved activations") + row(p, "logits and cross-entropy")) << what;
      EXPECT_GT(scratch, 0.0) << what;
      EXPECT_EQ(scratch, row(p, "LoRA and NF4 scratch")) << what;
      EXPECT_EQ(row(p, "frozen base (shards)"), double(t.engine().frozen_bytes())) << what;
    }
  }
}

// ---- through the command line --------------------------------------------------------------

test::CommandResult cli(const std::string& args) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string log = (std::filesystem::temp_directory_path() / (std::string("fsdp_plan_") + info->name() + ".log"));
  return test::run_command(args, log);
}

const std::string kBin = FSDP_TRAIN_BIN;
const std::string kTiny = test::source_path("configs/tiny.yaml") + " --set data.source=synthetic";

TEST(PlanCli, PrintsTheTableAndTheAnswers) {
  const auto r = cli(kBin + " plan --config " + test::source_path("configs/llama2_70b.yaml") +
                     " --ranks 64 --device-memory 80GB");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* part : {"fp32 master weights (shards)", "AdamW moments", "gathered units in flight",
                           "saved activations", "logits and cross-entropy", "allocator headroom", "peak",
                           "fits:", "largest train.micro_batch_size that fits on 64 rank(s): 5"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " missing in:\n" << r.out;
  // The per-mode table: full checkpointing fits 24 GPUs at micro-batch 1 and micro-batch 5 on 64.
  std::istringstream lines(r.out);
  std::string line, mode, fewest, largest;
  bool found = false;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    if (words >> mode >> fewest >> largest && mode == "full" && words.eof()) found = fewest == "24" && largest == "5";
  }
  EXPECT_TRUE(found) << r.out;
}

// The QLoRA seed workflow (slurm/qlora.sbatch: one node, 4 GPUs of 24 GB) plans its NF4 base
// at about 0.53 bytes per block-matrix parameter plus the dense embedding and head, only
// the adapters' master weights, moments and gradients, and fits.
TEST(PlanCli, QloraSeedConfigPlansTheFrozenBaseAndFitsItsJob) {
  const auto r = cli(kBin + " plan --config " + test::source_path("configs/qlora_llama2_7b.yaml") +
                     " --set model.init_from= --ranks 4 --device-memory 24GB");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* part : {"adapter parameters (LoRA)", "frozen base (shards)", "NF4 base", "LoRA and NF4 scratch",
                           "gathered frozen units in flight", "saved activations", "fits:"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " missing in:\n" << r.out;
  const config::Config cfg = load({"model.init_from="}, "configs/qlora_llama2_7b.yaml");
  const plan::MemoryPlan p = plan::plan_memory(cfg, config::training_model_config(cfg), gpus(4, 24e9));
  // Llama 2 7B: 6.48B parameters in the blocks' matrices at 0.5 + 1/64 + 4/16384 bytes (NF4
  // codes, absmax codes, nested absmax), 2 x 131M in bf16 (embedding, lm_head), over 4 ranks.
  const double nf4 = 32 * (4096.0 * 4096 * 4 + 3 * 4096.0 * 11008) * (0.5 + 1.0 / 64 + 4.0 / 16384);
  const double dense = 2 * 32000.0 * 4096 * 2;
  EXPECT_NEAR(row(p, "frozen base (shards)"), (nf4 + dense) / 4, 0.01 * (nf4 + dense) / 4) << plan::format_plan(p);
  // r = 16 on the 7 matrices of 32 blocks: 40M adapter parameters, 16 bytes each, over 4 ranks.
  const double adapters = 32 * 16 * (4 * (4096.0 + 4096) + 2 * (4096.0 + 11008) + (11008.0 + 4096));
  EXPECT_NEAR(row(p, "fp32 master weights (shards)"), adapters * 4 / 4, 1024.0);
  EXPECT_TRUE(p.fits()) << plan::format_plan(p);
}

TEST(PlanCli, BadArgumentsAreUsageErrors) {
  const auto mem = cli(kBin + " plan --config " + kTiny + " --device-memory lots");
  EXPECT_EQ(mem.code, 2);
  EXPECT_NE(mem.out.find("--device-memory 'lots' is not a size"), std::string::npos) << mem.out;
  EXPECT_EQ(cli(kBin + " plan --config " + kTiny + " --ranks 0").code, 2);
  EXPECT_EQ(cli(kBin + " plan").code, 2);
  const auto gpu = cli(kBin + " plan --config " + kTiny + " --device cuda");
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.out.find("--device-memory 80GB"), std::string::npos) << gpu.out;
}

TEST(PlanCli, ARunThatCannotFitEvenAtMicroBatchOneSaysByHowMuchAndWhatHelps) {
  const auto r = cli(kBin + " plan --config " + test::source_path("configs/llama2_70b.yaml") +
                     " --set train.activation_checkpointing=none --ranks 64 --device-memory 80GB");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("does NOT fit: over by"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train.activation_checkpointing: full makes it fit"), std::string::npos) << r.out;
}

// A hidden size of 1e9 is past model::ShapeLimits: a config error. One within the limits
// that no machine holds (4.4T parameters) is the plan's to refuse, before allocating.
TEST(PlanCli, TrainRefusesAHiddenSizeOf1e9BeforeAllocating) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = cli(kBin + " train --config " + kTiny + " --set model.hidden_size=1000000000 --set run.dir=/tmp/fsdp_plan_1e9");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("model.hidden_size must be in [1, 262144], got 1000000000"), std::string::npos) << r.out;
  r = cli(kBin + " train --config " + kTiny +
          " --set model.hidden_size=65536 --set model.num_heads=64 --set model.num_kv_heads=64 --set model.num_layers=64"
          " --set model.intermediate_size=262144 --set run.dir=/tmp/fsdp_plan_4t");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("model.hidden_size 65536"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refusing to start"), std::string::npos) << r.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(PlanCli, TrainRefusesABillionLayersFromAHuggingFaceConfig) {
  const std::string dir = hf_folder("fsdp_plan_hf_layers", 1000000000);
  const auto r = cli(kBin + " train --config " + kTiny + " --set model.init_from=" + dir +
                     " --set run.dir=/tmp/fsdp_plan_hf_layers_run");
  // Past model::ShapeLimits: refused while reading the folder (a bad input file: exit 1).
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(dir + "/config.json: 'num_hidden_layers' must be in [1, 4096], got 1000000000"),
            std::string::npos)
      << r.out;
}

// With model.init_from the layer count comes from config.json, so the rule on
// train.activation_checkpointing_every is checked once the folder is read.
TEST(MemoryPlan, CheckpointingEveryAboveAHuggingFaceModelsLayersIsAConfigError) {
  const std::string dir = hf_folder("fsdp_plan_hf_two_layers", 2);
  const config::Config cfg = load({"model.init_from=" + dir, "train.activation_checkpointing=full",
                                   "train.activation_checkpointing_every=3"});
  try {
    config::training_model_config(cfg);
    ADD_FAILURE() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'train.activation_checkpointing_every' must be at most the model's 2 layers"),
              std::string::npos)
        << e.what();
  }
}

TEST(PlanCli, TrainRefusesA1p3BModelUnderAn8GBAddressSpaceLimit) {
  // ~1.3B parameters: 16 bytes each for fp32 weights, gradients and AdamW moments is 21 GB.
  const auto r = cli("ulimit -v 8000000 && " + kBin + " train --config " + kTiny +
                     " --set model.hidden_size=2048 --set model.intermediate_size=5504 --set model.num_layers=24"
                     " --set model.num_heads=16 --set model.num_kv_heads=16 --set model.vocab_size=32000"
                     " --set run.dir=/tmp/fsdp_plan_ulimit");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("RLIMIT_AS (ulimit -v) allows 7.63 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank(s)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fsdp
