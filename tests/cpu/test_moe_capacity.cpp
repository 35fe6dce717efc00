// moe.capacity_factor (Note [Expert capacity] in model/moe_capacity.h): the key (default,
// file, --set, the refusals naming it), the capacity's arithmetic, and the drop itself on a
// sort made by moe_permute_plan: each expert keeps its most probable pairs (ties to the lower
// token), the kept ones in token order, every dropped pair after them, slot the inverse of
// order; the step line and metrics.jsonl count the drops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/model/moe_capacity.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/ops/moe_permute.h"

namespace fsdp {
namespace {

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    config::load_config_string("", "configs/x.yaml", overrides);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(MoeCapacityConfig, DefaultFileOverrideAndRefusals) {
  EXPECT_EQ(config::Config{}.moe.capacity_factor, 0.0);
  EXPECT_EQ(config::load_config_string("model:\n  preset: tiny_moe\nmoe:\n  capacity_factor: 1.25\n", "x")
                .moe.capacity_factor,
            1.25);
  EXPECT_EQ(config::load_config_string("", "x", {"model.preset=tiny_moe", "moe.capacity_factor=2"}).moe.capacity_factor,
            2.0);
  EXPECT_NE(config::describe_keys().find("moe.capacity_factor = 0"), std::string::npos);
  EXPECT_EQ(error_of({"moe.capacity_factor=-1"}),
            "--set moe.capacity_factor=-1: key 'moe.capacity_factor' must be a finite number >= 0, got -1");
  EXPECT_EQ(error_of({"moe.capacity_factor=1.5"}),
            "--set moe.capacity_factor=1.5: key 'moe.capacity_factor' is 1.5, which needs a mixture of experts "
            "(model.num_experts > 0): a dense model has no experts to drop tokens from; set it to 0");
}

TEST(MoeCapacity, CapacityIsCeilOfFactorTokensTopKOverExperts) {
  model::LlamaConfig c = model::llama_preset("tiny_moe");  // 8 experts, top-2
  EXPECT_EQ(model::expert_capacity(c, 32), 0) << "dropless by default";
  c.capacity_factor = 1.0;
  EXPECT_EQ(model::expert_capacity(c, 32), 8);   // 1 x 32 x 2 / 8
  c.capacity_factor = 0.5;
  EXPECT_EQ(model::expert_capacity(c, 33), 5);   // ceil(4.125)
  c.capacity_factor = 0.01;
  EXPECT_EQ(model::expert_capacity(c, 4), 1);    // at least one pair
}

// 5 tokens, top-2 of 3 experts; pair f = t k + j. Expert 0 is chosen by pairs 0, 3, 4, 9
// (tokens 0, 1, 2, 4), expert 1 by 1, 6 (tokens 0, 3), expert 2 by 2, 5, 7, 8 (tokens 1,
// 2, 3, 4). Capacity 2.
TEST(MoeCapacity, DropsTheLeastProbablePairsOfEachExpert) {
  const int64_t N = 5, k = 2, E = 3;
  const std::vector<int> choice = {0, 1, 2, 0, 0, 2, 1, 2, 2, 0};  // [N, k]
  // probs[t][e]: expert 0's pairs have 0.5, 0.4, 0.4, 0.6; expert 2's 0.3, 0.3, 0.35, 0.2.
  const std::vector<float> probs = {0.5f, 0.3f, 0.2f,  0.4f, 0.3f, 0.3f,  0.4f, 0.3f, 0.3f,
                                    0.25f, 0.4f, 0.35f, 0.6f, 0.2f, 0.2f};
  Tensor expert = Tensor::empty({N, k}, DType::I32), p = Tensor::empty({N, E}, DType::F32);
  for (int64_t i = 0; i < N * k; ++i) expert.set_flat(i, choice[size_t(i)]);
  for (int64_t i = 0; i < N * E; ++i) p.set_flat(i, probs[size_t(i)]);
  Tensor order = Tensor::empty({N * k}, DType::I32), slot = Tensor::empty({N * k}, DType::I32),
         offsets = Tensor::empty({E + 1}, DType::I32);
  moe_permute_plan(expert, E, order, slot, offsets);
  EXPECT_EQ(model::drop_over_capacity(p, expert, 2, order, slot, offsets), 4);
  // Expert 0 keeps pairs 9 (0.6) and 0 (0.5), in flat (token) order; expert 1 both; expert
  // 2 pair 7 (0.35) and, of the tied 0.3s, the lower pair 2; then the dropped 3, 4, 5, 8.
  std::vector<int> got_order, got_offsets;
  for (int64_t i = 0; i < N * k; ++i) got_order.push_back(int(order.get_flat(i)));
  for (int64_t i = 0; i <= E; ++i) got_offsets.push_back(int(offsets.get_flat(i)));
  EXPECT_EQ(got_order, (std::vector<int>{0, 9, 1, 6, 2, 7, 3, 4, 5, 8}));
  EXPECT_EQ(got_offsets, (std::vector<int>{0, 2, 4, 6}));
  for (int64_t s = 0; s < N * k; ++s) EXPECT_EQ(slot.get_flat(int64_t(order.get_flat(s))), double(s));
  // Under capacity nothing moves.
  moe_permute_plan(expert, E, order, slot, offsets);
  EXPECT_EQ(model::drop_over_capacity(p, expert, 4, order, slot, offsets), 0);
  for (int64_t i = 0; i <= E; ++i) EXPECT_EQ(offsets.get_flat(i), std::vector<double>({0, 4, 6, 10})[size_t(i)]);
}

TEST(MoeCapacity, TheStepLineAndMetricsCountTheDrops) {
  obs::StepMetrics m;
  m.expert_load = {{3, 1}};
  m.expert_imbalance = {1.5};
  m.dropped = 7;
  EXPECT_NE(obs::format_step_line(m, 10).find("expert load max/mean 1.50 (layer 0), dropped 7"), std::string::npos)
      << obs::format_step_line(m, 10);
  EXPECT_NE(obs::to_json_line(m).find("\"dropped\":7"), std::string::npos) << obs::to_json_line(m);
}

}  // namespace
}  // namespace fsdp
