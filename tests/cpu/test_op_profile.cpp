// The op profiler (fsdp/core/op_profile.h) on the CPU backend: a known sequence of op calls
// is counted exactly, per op name, and nothing is recorded while it is off. The CUDA side
// (event pairs, the Llama's counts on the device) is tests/cuda/test_cuda_op_profile.cpp.
#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

#include "fsdp/core/op_profile.h"
#include "fsdp/ops/elementwise.h"
#include "fsdp/ops/matmul.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

std::map<std::string, int64_t> calls_by_op(const std::vector<op_profile::OpTime>& rows) {
  std::map<std::string, int64_t> m;
  for (const auto& r : rows) m[r.op] = r.calls;
  return m;
}

// Three adds, two scales, one 192^3 matmul, four sums of squares and a fill.
void known_sequence() {
  const Tensor a = random_tensor({192, 192}, DType::F32, 1), b = random_tensor({192, 192}, DType::F32, 2);
  const Tensor c = Tensor::empty({192, 192}, DType::F32);
  for (int i = 0; i < 3; ++i) add(a, b, c);
  scale_(c, 0.5);
  scale_(c, 2.0);
  matmul(a, b, c, false, true);
  for (int i = 0; i < 4; ++i) (void)sum_squares(c);
  fill_(c, 1.0);
}

class OpProfile : public ::testing::Test {
 protected:
  void SetUp() override { op_profile::reset(); }
  void TearDown() override {
    op_profile::enable(false);
    op_profile::reset();
  }
};

TEST_F(OpProfile, OffByDefault) { EXPECT_FALSE(op_profile::enabled()); }

TEST_F(OpProfile, CountsAKnownSequenceExactly) {
  op_profile::enable(true);
  known_sequence();
  op_profile::enable(false);
  const auto rows = op_profile::report();
  const std::map<std::string, int64_t> want = {{"add", 3}, {"scale", 2}, {"matmul", 1}, {"sum_squares", 4}, {"fill", 1}};
  EXPECT_EQ(calls_by_op(rows), want);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_GE(rows[i].total_ms, 0.0) << rows[i].op;
    if (i > 0) EXPECT_GE(rows[i - 1].total_ms, rows[i].total_ms) << "not sorted by time at " << rows[i].op;
    if (rows[i].op == "matmul") EXPECT_GT(rows[i].total_ms, 0.0);  // 14 MFLOP: well above the clock's tick
  }
  // Reading the report does not consume it; a second sequence adds to the same counts.
  EXPECT_EQ(calls_by_op(op_profile::report()), want);
  op_profile::enable(true);
  known_sequence();
  const auto twice = calls_by_op(op_profile::report());
  EXPECT_EQ(twice.at("add"), 6);
  EXPECT_EQ(twice.at("sum_squares"), 8);
}

TEST_F(OpProfile, DisabledRecordsNothing) {
  known_sequence();
  EXPECT_TRUE(op_profile::report().empty());
  op_profile::enable(true);
  known_sequence();
  op_profile::enable(false);
  known_sequence();  // after switching off: not counted
  EXPECT_EQ(calls_by_op(op_profile::report()).at("add"), 3);
}

TEST_F(OpProfile, ResetForgetsEverything) {
  op_profile::enable(true);
  known_sequence();
  op_profile::reset();
  EXPECT_TRUE(op_profile::report().empty());
  fill_(Tensor::empty({4}, DType::F32), 0.0);
  const auto rows = op_profile::report();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "fill");
  EXPECT_EQ(rows[0].calls, 1);
}

// One record for the process: calls from several host threads all count, none lost.
TEST_F(OpProfile, CountsCallsFromEveryThread) {
  op_profile::enable(true);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      const Tensor x = Tensor::zeros({64}, DType::F32);
      for (int i = 0; i < 250; ++i) scale_(x, 1.0);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(calls_by_op(op_profile::report()), (std::map<std::string, int64_t>{{"scale", 1000}}));
}

}  // namespace
}  // namespace fsdp::test
