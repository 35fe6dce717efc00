// The CPU token permutation for a mixture of experts (fsdp/ops/moe_permute.h): the plan is
// std::stable_sort of the (token, choice) pairs by expert (empty experts, one expert taking
// everything, N = 1, a prime N, k = 1, 2, 4), gather and combine forward against plain
// float64 loops, their backward against central finite differences in float64, the
// accumulate flag, a residual aliasing the output, and refusals named by argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "fsdp/ops/moe_permute.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

Tensor experts_of(int64_t n, int64_t k, int64_t e, uint64_t seed, int only = -1) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty({n, k}, DType::I32);
  for (int64_t i = 0; i < n * k; ++i) t.set_flat(i, double(only >= 0 ? only : int64_t(rng() % uint64_t(e))));
  return t;
}

struct Plan {
  Tensor order, slot, offsets;
};

Plan plan(const Tensor& expert, int64_t e) {
  const int64_t pairs = expert.numel();
  Plan p{Tensor::empty({pairs}, DType::I32), Tensor::empty({pairs}, DType::I32), Tensor::empty({e + 1}, DType::I32)};
  moe_permute_plan(expert, e, p.order, p.slot, p.offsets);
  return p;
}

TEST(MoePermute, PlanIsTheStableSortByExpert) {
  for (int64_t n : {int64_t(1), int64_t(13), int64_t(97)})
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(4)})
      for (int only : {-1, 2}) {  // random experts (some empty), then everything on expert 2
        const int64_t e = 6;
        const Tensor ex = experts_of(n, k, e, uint64_t(n * 10 + k), only);
        const Plan p = plan(ex, e);
        std::vector<int32_t> want(size_t(n * k));
        std::iota(want.begin(), want.end(), 0);
        std::stable_sort(want.begin(), want.end(),
                         [&](int32_t a, int32_t b) { return ex.get_flat(a) < ex.get_flat(b); });
        for (int64_t s = 0; s < n * k; ++s) {
          ASSERT_EQ(int32_t(p.order.get_flat(s)), want[size_t(s)]) << "n=" << n << " k=" << k << " s=" << s;
          ASSERT_EQ(int64_t(p.slot.get_flat(want[size_t(s)])), s);
        }
        for (int64_t x = 0; x < e; ++x) {
          const int64_t count = int64_t(std::count_if(want.begin(), want.end(), [&](int32_t f) {
            return int64_t(ex.get_flat(f)) == x;
          }));
          EXPECT_EQ(int64_t(p.offsets.get_flat(x + 1) - p.offsets.get_flat(x)), count) << "expert " << x;
        }
        EXPECT_EQ(int64_t(p.offsets.get_flat(0)), 0);
        EXPECT_EQ(int64_t(p.offsets.get_flat(e)), n * k);
      }
}

TEST(MoePermute, ForwardAgainstLoops) {
  const int64_t n = 11, k = 2, c = 7, e = 4;
  const Tensor ex = experts_of(n, k, e, 3);
  const Plan p = plan(ex, e);
  for (DType t : {DType::F64, DType::F32}) {
    const Tensor x = random_tensor({n, c}, t, 1), ys = random_tensor({n * k, c}, t, 2);
    const Tensor w = random_tensor({n, k}, t, 3, 0, 1), res = random_tensor({n, c}, t, 4);
    Tensor xs = Tensor::empty({n * k, c}, t), out = Tensor::empty({n, c}, t);
    moe_gather_rows(x, p.order, k, xs);
    moe_combine(ys, p.slot, w, res, out);
    double worst = 0;
    for (int64_t s = 0; s < n * k; ++s)
      for (int64_t i = 0; i < c; ++i)
        worst = std::max(worst, std::abs(xs.get({s, i}) - x.get({int64_t(p.order.get_flat(s)) / k, i})));
    EXPECT_EQ(worst, 0.0) << dtype_name(t);  // a copy
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < c; ++i) {
        double want = res.get({r, i});
        for (int64_t j = 0; j < k; ++j) want += w.get({r, j}) * ys.get({int64_t(p.slot.get_flat(r * k + j)), i});
        EXPECT_NEAR(out.get({r, i}), want, t == DType::F64 ? 1e-14 : 1e-6) << dtype_name(t);
      }
    // The residual may be the output itself.
    Tensor in_place = res.clone();
    moe_combine(ys, p.slot, w, in_place, in_place);
    EXPECT_EQ(rel_error(in_place, out), 0.0) << dtype_name(t);
  }
}

TEST(MoePermute, BackwardAgainstFiniteDifferences) {
  const int64_t n = 9, k = 3, c = 5, e = 4;
  const Tensor ex = experts_of(n, k, e, 8);
  const Plan p = plan(ex, e);
  const Tensor x = random_tensor({n, c}, DType::F64, 1), ys = random_tensor({n * k, c}, DType::F64, 2);
  const Tensor w = random_tensor({n, k}, DType::F64, 3, 0, 1);
  const Tensor up_out = random_tensor({n, c}, DType::F64, 4), up_xs = random_tensor({n * k, c}, DType::F64, 5);
  // combine: L = <up_out, combine(ys, w)>
  auto combine_loss = [&] {
    Tensor out = Tensor::empty({n, c}, DType::F64);
    moe_combine(ys, p.slot, w, Tensor(), out);
    return weighted_sum(out, up_out);
  };
  Tensor dys = Tensor::empty({n * k, c}, DType::F64), dw = Tensor::empty({n, k}, DType::F64);
  moe_combine_backward(up_out, ys, p.slot, w, dys, dw);
  EXPECT_LT(fd_rel_error(combine_loss, ys, dys), 1e-8);
  EXPECT_LT(fd_rel_error(combine_loss, w, dw), 1e-8);
  // gather: L = <up_xs, gather(x)>; the backward overwrites, or adds to what dx holds.
  auto gather_loss = [&] {
    Tensor xs = Tensor::empty({n * k, c}, DType::F64);
    moe_gather_rows(x, p.order, k, xs);
    return weighted_sum(xs, up_xs);
  };
  Tensor dx = Tensor::empty({n, c}, DType::F64);
  moe_gather_rows_backward(up_xs, p.slot, k, dx, /*accumulate=*/false);
  EXPECT_LT(fd_rel_error(gather_loss, x, dx), 1e-8);
  Tensor acc = random_tensor({n, c}, DType::F64, 6);
  const Tensor before = acc.clone();
  moe_gather_rows_backward(up_xs, p.slot, k, acc, /*accumulate=*/true);
  for (int64_t i = 0; i < n * c; ++i) EXPECT_NEAR(acc.get_flat(i), before.get_flat(i) + dx.get_flat(i), 1e-14);
}

TEST(MoePermute, BadArgumentsAreNamed) {
  Tensor ex = experts_of(3, 2, 4, 1);
  ex.set_flat(3, 7.0);
  Tensor order = Tensor::empty({6}, DType::I32), slot = Tensor::empty({6}, DType::I32);
  EXPECT_ERROR_MENTIONS(moe_permute_plan(ex, 4, order, slot, Tensor::empty({5}, DType::I32)),
                        "expert 7 for token 1 (choice 1) is outside [0, 4)");
  EXPECT_ERROR_MENTIONS(moe_permute_plan(ex, 4, order, slot, Tensor::empty({4}, DType::I32)), "offsets");
  const Tensor x = random_tensor({3, 5}, DType::F32, 1);
  EXPECT_ERROR_MENTIONS(moe_gather_rows(x, order, 2, Tensor::empty({5, 5}, DType::F32)), "xs");
  EXPECT_ERROR_MENTIONS(moe_combine(Tensor::empty({6, 5}, DType::F32), slot, Tensor::empty({3, 2}, DType::F64),
                                    Tensor(), Tensor::empty({3, 5}, DType::F32)),
                        "weight");
}

TEST(MoePermute, SameBitsOnEveryRun) {
  const int64_t n = 300, k = 2, c = 64, e = 8;
  const Plan p = plan(experts_of(n, k, e, 9), e);
  const Tensor ys = random_tensor({n * k, c}, DType::F32, 2), w = random_tensor({n, k}, DType::F32, 3, 0, 1);
  const Tensor dout = random_tensor({n, c}, DType::F32, 4);
  Tensor a = Tensor::empty({n * k, c}, DType::F32), b = Tensor::empty({n * k, c}, DType::F32);
  Tensor da = Tensor::empty({n, k}, DType::F32), db = Tensor::empty({n, k}, DType::F32);
  moe_combine_backward(dout, ys, p.slot, w, a, da);
  moe_combine_backward(dout, ys, p.slot, w, b, db);
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(da.data_ptr(), db.data_ptr(), da.nbytes()), 0);
}

}  // namespace
}  // namespace fsdp::test
