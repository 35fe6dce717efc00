// LR schedules against hand-computed values, grad-norm clipping, and the decay segments
// that make a sharded AdamW decay exactly what a single process would.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>

#include "fsdp/fsdp/unit_decay.h"
#include "fsdp/model/param_units.h"
#include "fsdp/optim/loss_scaler.h"
#include "fsdp/optim/lr_schedule.h"
#include "fsdp/optim/optimizer.h"
#include "test_util.h"

namespace fsdp {
namespace {

using optim::LrDecay;
using optim::LrSchedule;

TEST(LrSchedule, LinearWarmupThenCosineToTheFloor) {
  const LrSchedule s{1e-3, 1e-4, 10, 110, LrDecay::Cosine};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);   // 1e-3 * 1/10
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);   // 1e-3 * 5/10
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);  // end of warm-up: the peak
  // step 60: p = 50/100 = 0.5, cos(pi/2) = 0 -> min + (peak - min)/2 = 5.5e-4
  EXPECT_NEAR(s.at(60), 5.5e-4, 1e-15);
  // step 35: p = 0.25 -> 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 = 1e-4 + 9e-4 * 0.853553390593 = 8.68198051534e-4
  EXPECT_NEAR(s.at(35), 8.68198051534e-4, 1e-14);
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);  // the last step trains at the floor
}

TEST(LrSchedule, LinearDecay) {
  const LrSchedule s{2e-3, 2e-4, 0, 100, LrDecay::Linear};
  EXPECT_DOUBLE_EQ(s.at(0), 2e-3);
  EXPECT_NEAR(s.at(25), 2e-3 - 1.8e-3 * 0.25, 1e-15);  // 1.55e-3
  EXPECT_NEAR(s.at(100), 2e-4, 1e-15);
}

TEST(LrSchedule, ConstantAfterWarmup) {
  const LrSchedule s{3e-4, 0, 4, 50, LrDecay::Constant};
  EXPECT_DOUBLE_EQ(s.at(2), 1.5e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 3e-4);
  EXPECT_DOUBLE_EQ(s.at(50), 3e-4);
}

TEST(GradClip, FactorMatchesTorchClipGradNorm) {
  EXPECT_DOUBLE_EQ(optim::clip_factor(0.5, 1.0), 1.0);  // below the bound: untouched
  EXPECT_DOUBLE_EQ(optim::clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_DOUBLE_EQ(optim::clip_factor(4.0, 0.0), 1.0);  // 0 disables clipping
}

TEST(DecaySegments, NormsDoNotDecayAndRunsMerge) {
  model::LlamaConfig c = model::llama_preset("tiny");
  const auto units = model::llama_units(c);
  const auto seg = decay_segments(units[1]);
  ASSERT_EQ(seg.size(), 2u);  // seven matrices, then the two norm weights
  EXPECT_TRUE(seg[0].decay);
  EXPECT_FALSE(seg[1].decay);
  EXPECT_EQ(seg[1].end, units[1].numel);
  EXPECT_EQ(seg[1].end - seg[1].begin, 2 * c.hidden_size);
}

TEST(AdamWRange, ShardedStepsEqualTheWholeStep) {
  // Stepping [0, n) at once or as three shards gives identical bits: the property FSDP's
  // sharded optimizer relies on.
  model::LlamaConfig c = model::llama_preset("tiny");
  c.num_layers = 1;
  const auto unit = model::llama_units(c)[1];
  const auto seg = decay_segments(unit);
  const int64_t n = unit.numel;
  Tensor p1 = test::random_tensor({n}, DType::F32, 1), g = test::random_tensor({n}, DType::F32, 2);
  Tensor m1 = Tensor::zeros({n}, DType::F32), v1 = Tensor::zeros({n}, DType::F32);
  Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
  const optim::AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  optim::adamw_step_range(seg, 0, p1, g, m1, v1, cfg, 1e-3, 1, 0.5);
  const int64_t cuts[] = {0, n / 3, n - 2 * c.hidden_size + 5, n};  // one cut inside the norms
  for (int k = 0; k < 3; ++k) {
    const int64_t b = cuts[k], len = cuts[k + 1] - cuts[k];
    optim::adamw_step_range(seg, b, p2.narrow(0, b, len), g.narrow(0, b, len), m2.narrow(0, b, len),
                            v2.narrow(0, b, len), cfg, 1e-3, 1, 0.5);
  }
  ASSERT_EQ(std::memcmp(p1.data_ptr(), p2.data_ptr(), p1.nbytes()), 0);
  ASSERT_EQ(std::memcmp(v1.data_ptr(), v2.data_ptr(), v1.nbytes()), 0);
}


// torch.amp.GradScaler's update rule as its documentation states it (growth_factor 2,
// backoff_factor 0.5): an inf/NaN step halves the scale and resets the clean-step count;
// growth_interval clean steps in a row double it. Worked by hand for interval 3.
TEST(DynamicLossScaler, FollowsGradScalersUpdateRule) {
  optim::DynamicLossScaler s(1024, 3);
  EXPECT_TRUE(s.enabled());
  struct Want {
    bool found_inf, applies;
    double scale;
    int64_t good, skipped;
  };
  const Want seq[] = {{false, true, 1024, 1, 0}, {false, true, 1024, 2, 0}, {true, false, 512, 0, 1},
                      {false, true, 512, 1, 1},  {false, true, 512, 2, 1},  {false, true, 1024, 0, 1},
                      {true, false, 512, 0, 2},  {true, false, 256, 0, 3},  {false, true, 256, 1, 3},
                      {false, true, 256, 2, 3},  {false, true, 512, 0, 3},  {false, true, 512, 1, 3}};
  int i = 0;
  for (const Want& w : seq) {
    EXPECT_EQ(s.update(w.found_inf), w.applies) << "update " << i;
    EXPECT_EQ(s.scale(), w.scale) << "update " << i;
    EXPECT_EQ(s.good_steps(), w.good) << "update " << i;
    EXPECT_EQ(s.skipped_steps(), w.skipped) << "update " << i;
    ++i;
  }
  // A checkpoint's state comes back whole; a disabled scaler (float32/bf16) ignores it.
  optim::DynamicLossScaler r(65536, 3);
  r.restore(s.scale(), s.good_steps(), s.skipped_steps());
  EXPECT_EQ(r.scale(), 512);
  EXPECT_EQ(r.good_steps(), 1);
  EXPECT_EQ(r.skipped_steps(), 3);
  optim::DynamicLossScaler off;
  off.restore(512, 1, 3);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_TRUE(off.update(true));  // never skips
  EXPECT_EQ(off.skipped_steps(), 0);
  // Growth stops below float32's largest value.
  optim::DynamicLossScaler big(std::ldexp(1.0, 127), 1);
  big.update(false);
  EXPECT_EQ(big.scale(), std::ldexp(1.0, 127));
}

}  // namespace
}  // namespace fsdp
