// The memory plan under expert parallelism (issue 28): its engine rows shrink to a block
// without its experts and this rank's experts (tests/mpi/test_memory_plan.cpp holds them and
// the activations to what the trainer allocates at E=2), the expert-parallel preset fits its
// job with its peak pinned, `plan` proposes the smallest expert degree that fits a Mixtral
// run that does not, and never a layout the trainer refuses: each of
// plan/trainable_layout.h's constants is held to its refusal in train/setup.cpp here.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/config/model_options.h"
#include "fsdp/dist/mesh.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/plan/trainable_layout.h"
#include "fsdp/train/setup.h"
#include "expert_parallel_start_up.h"
#include "memory_plan_checks.h"
#include "test_util.h"

namespace fsdp {
namespace {

config::Config load(const std::vector<std::string>& o, const std::string& file) {
  return config::load_config(test::source_path(file), o);
}

plan::PlanTarget target(int ranks, int per_node, bool gpu, double bytes) {
  return test::plan_target(ranks, per_node, gpu, bytes);
}

double row(const plan::MemoryPlan& p, const std::string& name) { return test::plan_row(p, name); }

constexpr double kGiB = double(1ull << 30);

// configs/mixtral_8x7b_ep.yaml on its job (4 nodes x 8 GPUs of 80 GB): the sharded state
// FSDP alone's, the gathered units a block without its experts and one expert (sharded over
// the 4 GPUs holding it) instead of whole layers, the expert side's activations 4x.
TEST(ExpertParallelPlan, ThePresetFitsItsJobWithItsPeakPinned) {
  const config::Config ep = load({}, "configs/mixtral_8x7b_ep.yaml");
  ASSERT_EQ(ep.parallel.expert, 8);
  const model::LlamaConfig m = config::training_model_config(ep);
  const plan::PlanTarget job = target(32, 8, true, 80e9);
  const plan::MemoryPlan p = plan::plan_memory(ep, m, job);
  config::Config alone = ep;
  alone.parallel.expert = 1;
  const plan::MemoryPlan a = plan::plan_memory(alone, m, job);
  EXPECT_TRUE(p.fits()) << plan::format_plan(p);
  EXPECT_NEAR(p.peak / kGiB, 49.72, 0.01) << plan::format_plan(p);  // the figure the config's comment gives
  EXPECT_NEAR(a.peak / kGiB, 48.63, 0.01) << plan::format_plan(a);
  EXPECT_NEAR(row(p, "fp32 master weights (shards)") / row(a, "fp32 master weights (shards)"), 1.0, 1e-3);
  // One expert (3 x 4096 x 14336) padded over 4 GPUs in bf16 is the largest unit: six in flight.
  EXPECT_EQ(row(p, "gathered units in flight"), 6 * 3 * 4096.0 * 14336 * 2);
  // FSDP alone: four whole layers (1.45B parameters each) over 32 GPUs in bf16.
  EXPECT_GT(row(a, "gathered units in flight") / row(p, "gathered units in flight"), 5.0);
  EXPECT_GT(row(p, "saved activations"), 2 * row(a, "saved activations"));
  EXPECT_EQ(plan::largest_micro_batch(ep, m, job), 4);
}

// A Mixtral run on 32 CPU nodes of one rank each (no tensor group to propose), already fully
// checkpointed at micro-batch 1: the plan proposes the smallest E that fits, alone or with
// one other change, and that E's plan does fit.
TEST(ExpertParallelPlan, ProposesTheSmallestExpertDegreeThatFits) {
  const config::Config cfg =
      load({"train.device=cpu", "train.dtype=float32"}, "configs/mixtral_8x7b.yaml");
  const model::LlamaConfig m = config::training_model_config(cfg);
  for (const auto& [gib, expected] : std::vector<std::pair<double, std::string>>{
           {55, "parallel.expert: 4 (2 of the 8 experts of every layer per rank, tokens moved by all-to-all) makes it "
                "fit"},
           {52, "parallel.expert: 8 (1 of the 8 experts of every layer per rank, tokens moved by all-to-all) makes it "
                "fit"},
           {48.5, "parallel.expert: 8 (1 of the 8 experts of every layer per rank, tokens moved by all-to-all) with "
                  "fsdp.prefetch_limit: 0 makes it fit"}}) {
    const plan::PlanTarget cpu = target(32, 1, false, gib * kGiB);
    const plan::MemoryPlan p = plan::plan_memory(cfg, m, cpu);
    ASSERT_FALSE(p.fits()) << gib;
    const std::string advice = plan::advise(cfg, m, p);
    EXPECT_NE(advice.find(expected), std::string::npos) << gib << " GiB: " << advice;
    config::Config at = cfg;
    at.parallel.expert = expected.find("expert: 4") != std::string::npos ? 4 : 8;
    if (expected.find("prefetch") != std::string::npos) at.fsdp.prefetch_limit = 0;
    EXPECT_TRUE(plan::plan_memory(at, m, cpu).fits()) << gib;
  }
  // fewest_ranks keeps E dividing the shard group: at E=8, whole expert groups.
  config::Config e8 = cfg;
  e8.parallel.expert = 8;
  const auto n = plan::fewest_ranks(e8, m, target(32, 1, false, 52 * kGiB), "full");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n % 8, 0);
}

// The expert degree is proposed wherever the trainer builds it: on the CPU, on GPUs and
// beside parallel.tensor (what it refuses never is: memory_plan_search.cpp's unbuilt_layout
// filter, EachUnbuiltLayoutIsTheTrainersRefusal below).
TEST(ExpertParallelPlan, ProposedOnTheCpuOnGpusAndBesideTensorParallelism) {
  const config::Config cfg = load({"train.device=cpu", "train.dtype=float32"}, "configs/mixtral_8x7b.yaml");
  const model::LlamaConfig m = config::training_model_config(cfg);
  auto proposes_expert = [&](const config::Config& c, const plan::PlanTarget& t) {
    const plan::MemoryPlan p = plan::plan_memory(c, m, t);
    EXPECT_FALSE(p.fits());
    return plan::advise(c, m, p).find("parallel.expert") != std::string::npos;
  };
  EXPECT_TRUE(proposes_expert(cfg, target(32, 1, false, 52 * kGiB)));
  const config::Config gpu = load({}, "configs/mixtral_8x7b.yaml");
  // One rank per node: no tensor degree to propose first; at 44 GB only E=8 with offloading fits.
  EXPECT_TRUE(proposes_expert(gpu, target(32, 1, true, 44e9)));
  config::Config tensor = cfg;
  tensor.parallel.tensor = 2;
  EXPECT_TRUE(proposes_expert(tensor, target(32, 2, false, 40 * kGiB)));
}

// Each constant of trainable_layout.h against the trainer's refusal it stands for
// (train::rank_model_config and train::runs_on, on a mesh of E=2): lifting a refusal in
// setup.cpp fails this test until the constant is flipped, and the other way round.
std::string trainer_refusal(const std::vector<std::string>& overrides, Device device, int tensor) {
  const std::string r = test::expert_parallel_start_up(overrides, device, tensor);
  return r == "expert_parallel 2" ? "" : r;
}

TEST(ExpertParallelPlan, EachUnbuiltLayoutIsTheTrainersRefusal) {
  struct Case {
    std::vector<std::string> keys;
    bool gpu;
    int tensor;
    bool built;
  };
  const std::vector<std::string> moe = {"model.preset=tiny_moe", "parallel.expert=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return extra;
  };
  for (const Case& c : std::vector<Case>{{with({}), false, 1, true},
                                         {with({"parallel.tensor=2"}), false, 2, true},
                                         {with({"lora.enabled=true"}), false, 1, true},
                                         {with({"parallel.tensor=2", "lora.enabled=true"}), false, 2,
                                          plan::kExpertParallelLoraWithTensorBuilt},
                                         {with({"train.device=cuda"}), true, 1, true}}) {
    const std::string what = c.keys.back() + (c.gpu ? " on a GPU" : "");
    const config::Config cfg = config::load_config_string("", "configs/x.yaml", c.keys);
    const std::string refusal = trainer_refusal(c.keys, c.gpu ? Device::cuda(0) : Device::cpu(), c.tensor);
    EXPECT_EQ(refusal.empty(), c.built) << what << ": " << refusal;
    EXPECT_EQ(!plan::unbuilt_layout(cfg).has_value(), c.built) << what;
    if (!c.built) EXPECT_NE(refusal.find("parallel.expert"), std::string::npos) << refusal;
  }
}

// `plan` refuses an expert degree the ranks cannot hold as `train` does (exit 2, the key),
// and plans the GPU preset with no note of a layout `train` refuses.
TEST(ExpertParallelPlan, PlanRefusesWhatTheMeshCannotHoldAndNotesWhatIsNotBuilt) {
  const std::string bin = FSDP_TRAIN_BIN, log = (std::filesystem::temp_directory_path() / "fsdp_plan_ep.log").string();
  const auto bad = test::run_command(bin + " plan --config " + test::source_path("configs/tiny_moe.yaml") +
                                         " --set data.source=synthetic --set parallel.expert=4 --ranks 2",
                                     log);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("'parallel.expert' 4 must divide the 2 data-parallel ranks"), std::string::npos) << bad.out;
  const auto preset = test::run_command(bin + " plan --config " + test::source_path("configs/mixtral_8x7b_ep.yaml") +
                                            " --ranks 32 --device cuda --device-memory 80GB",
                                        log);
  EXPECT_EQ(preset.code, 0) << preset.out;
  EXPECT_NE(preset.out.find("over the 4 rank(s) holding them"), std::string::npos) << preset.out;
  EXPECT_EQ(preset.out.find("note: parallel.expert"), std::string::npos) << preset.out;
}

}  // namespace
}  // namespace fsdp
