// The MoE router on the CPU backend (fsdp/ops/moe_router.h): the forward against a plain
// float64 loop (softmax, logsumexp, top-k with ties to the lower index, renormalised
// weights), the statistics against plain sums, the backward against central finite
// differences of
//   L = sum_tj c_tj weight_tj + sum_e aux_e sum_t probs_te + z_scale sum_t lse_t^2
// with the top-k selection held fixed (logits with clear margins), the same bits for any
// thread count, float32 as the float64 computation rounded once, and the argument errors.
//
// Tolerances: float64 outputs are a few roundings from the exact value (1e-14 relative);
// float32 ones are computed in double and rounded once (2^-24 relative; the reference
// weights come from the stored probabilities, as the op's do).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fsdp/ops/moe_router.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

struct Routing {
  Tensor probs, lse, expert, weight;
};

Routing route(const Tensor& logits, int64_t k) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const DType s = stat_dtype(logits.dtype());
  Routing r{Tensor::empty({n, e}, s), Tensor::empty({n}, s), Tensor::empty({n, k}, DType::I32),
            Tensor::empty({n, k}, s)};
  moe_router_forward(logits, k, r.probs, r.lse, r.expert, r.weight);
  return r;
}

struct Stats {
  Tensor prob_sum, count, lse_sq;
};

Stats stats_of(const Routing& r) {
  const int64_t e = r.probs.size(1);
  const DType s = r.probs.dtype();
  Stats st{Tensor::empty({e}, s), Tensor::empty({e}, DType::I32), Tensor::empty({1}, s)};
  moe_router_stats(r.probs, r.expert, r.lse, st.prob_sum, st.count, st.lse_sq);
  return st;
}

// Row t of `logits` as doubles.
std::vector<double> row_of(const Tensor& logits, int64_t t) {
  std::vector<double> x(static_cast<size_t>(logits.size(1)));
  for (int64_t i = 0; i < logits.size(1); ++i) x[size_t(i)] = logits.get({t, i});
  return x;
}

// Indices of the k largest of p, largest first; a strictly larger value displaces, so
// the first of equal values (the lower index) wins.
std::vector<int64_t> reference_top_k(const std::vector<double>& p, int64_t k) {
  std::vector<int64_t> chosen;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t i = 0; i < int64_t(p.size()); ++i) {
      if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) continue;
      if (best < 0 || p[size_t(i)] > p[size_t(best)]) best = i;
    }
    chosen.push_back(best);
  }
  return chosen;
}

// Logits whose sorted values are at least 3/4 of a step apart in every row (a random
// order per row; the step spreads them over ~8 so that no probability underflows the
// gradient), so that an h = 1e-5 finite difference cannot change the selection; with_ties
// sets every third row to a few repeated levels instead.
Tensor separated_logits(int64_t n, int64_t e, uint64_t seed, bool with_ties = false) {
  std::mt19937_64 rng(seed);
  const double step = std::min(0.4, 8.0 / double(e));
  std::uniform_real_distribution<double> jitter(0, step / 4);
  Tensor logits = Tensor::empty({n, e}, DType::F64);
  std::vector<int64_t> perm(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < e; ++i) {
      const bool tied = with_ties && t % 3 == 0;
      const double v = tied ? 0.5 * double((i * 7) % 3) : step * double(perm[size_t(i)]) + jitter(rng);
      logits.set({t, i}, v - 4);
    }
  }
  return logits;
}

struct Shape {
  int64_t n, e, k;
  std::string name() const {
    return "n=" + std::to_string(n) + " e=" + std::to_string(e) + " k=" + std::to_string(k);
  }
};

const Shape kShapes[] = {{1, 8, 2}, {13, 8, 1}, {13, 8, 2}, {13, 8, 8}, {31, 5, 1}, {31, 5, 2},
                         {31, 5, 5}, {7, 1, 1},  {2053, 8, 2}, {5, 64, 6}, {3, 256, 8}};

TEST(OpMoeRouter, ForwardMatchesPlainLoop) {
  for (DType dt : {DType::F64, DType::F32})
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + sh.name());
      const Tensor logits = random_tensor({sh.n, sh.e}, DType::F64, uint64_t(sh.n * 1000 + sh.e * 10 + sh.k), -4, 4)
                                .to(dt);
      const Routing r = route(logits, sh.k);
      const double tol = dt == DType::F64 ? 1e-14 : 1.5e-7;
      for (int64_t t = 0; t < sh.n; ++t) {
        const std::vector<double> x = row_of(logits, t);
        const double m = *std::max_element(x.begin(), x.end());
        double sum = 0;
        for (double v : x) sum += std::exp(v - m);
        ASSERT_NEAR(r.lse.get({t}), m + std::log(sum), tol * std::max(1.0, std::fabs(m + std::log(sum)))) << t;
        std::vector<double> p(x.size());
        for (int64_t i = 0; i < sh.e; ++i) {
          const double want = std::exp(x[size_t(i)] - m) / sum;
          ASSERT_NEAR(r.probs.get({t, i}), want, tol * want) << t << "," << i;
          p[size_t(i)] = r.probs.get({t, i});  // selection runs on the stored probabilities
        }
        const std::vector<int64_t> chosen = reference_top_k(p, sh.k);
        double selected = 0;
        for (int64_t c : chosen) selected += p[size_t(c)];
        for (int64_t j = 0; j < sh.k; ++j) {
          ASSERT_EQ(int64_t(r.expert.get({t, j})), chosen[size_t(j)]) << t << "," << j;
          const double want = p[size_t(chosen[size_t(j)])] / selected;
          ASSERT_NEAR(r.weight.get({t, j}), want, tol * want) << t << "," << j;
        }
      }
    }
}

TEST(OpMoeRouter, ExactTiesGoToTheLowerExpert) {
  // Row 0: all equal; row 1: three-way tie at the top and a two-way tie below; row 2: a
  // tie straddling the k boundary.
  const Tensor logits = Tensor::empty({3, 5}, DType::F32);
  const double rows[3][5] = {{1, 1, 1, 1, 1}, {0, 3, 3, -1, 3}, {2, 0.5, 1, 1, -2}};
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t i = 0; i < 5; ++i) logits.set({t, i}, rows[t][i]);
  const int64_t want[3][5] = {{0, 1, 2, 3, 4}, {1, 2, 4, 0, 3}, {0, 2, 3, 1, 4}};
  for (int64_t k : {1, 2, 3, 5}) {
    const Routing r = route(logits, k);
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(int64_t(r.expert.get({t, j})), want[t][j]) << "k=" << k << " row " << t;
    // All-equal row: every chosen weight is exactly 1/k.
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(r.weight.get({0, j}), double(1.0f / float(k))) << "k=" << k;
  }
}

TEST(OpMoeRouter, StatsArePlainSums) {
  for (DType dt : {DType::F64, DType::F32})
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + sh.name());
      const Routing r = route(random_tensor({sh.n, sh.e}, DType::F64, uint64_t(sh.n + sh.e), -4, 4).to(dt), sh.k);
      const Stats st = stats_of(r);
      const double tol = dt == DType::F64 ? 1e-13 : 6e-8;  // a double sum rounded once
      double lse_sq = 0;
      std::vector<double> sums(size_t(sh.e), 0.0);
      std::vector<int64_t> counts(size_t(sh.e), 0);
      for (int64_t t = 0; t < sh.n; ++t) {
        lse_sq += r.lse.get({t}) * r.lse.get({t});
        for (int64_t i = 0; i < sh.e; ++i) sums[size_t(i)] += r.probs.get({t, i});
        for (int64_t j = 0; j < sh.k; ++j) ++counts[size_t(r.expert.get({t, j}))];
      }
      for (int64_t i = 0; i < sh.e; ++i) {
        EXPECT_NEAR(st.prob_sum.get({i}), sums[size_t(i)], tol * sums[size_t(i)]) << i;
        EXPECT_EQ(int64_t(st.count.get({i})), counts[size_t(i)]) << i;
      }
      EXPECT_NEAR(st.lse_sq.get({0}), lse_sq, tol * lse_sq);
      // Every token contributes k choices and probabilities summing to one.
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t(0)), sh.n * sh.k);
    }
}

// The scalar the backward differentiates, evaluated through the forward.
double router_loss(const Tensor& logits, int64_t k, const Tensor& c, const Tensor& aux, double z_scale) {
  const Routing r = route(logits, k);
  double l = 0;
  for (int64_t t = 0; t < logits.size(0); ++t) {
    if (c.defined())
      for (int64_t j = 0; j < k; ++j) l += c.get({t, j}) * r.weight.get({t, j});
    if (aux.defined())
      for (int64_t i = 0; i < logits.size(1); ++i) l += aux.get({i}) * r.probs.get({t, i});
    l += z_scale * r.lse.get({t}) * r.lse.get({t});
  }
  return l;
}

TEST(OpMoeRouter, BackwardMatchesFiniteDifferences) {
  // h = 1e-5 in float64: truncation ~1e-10 relative, rounding ~1e-16 |L| / h against
  // gradients as small as ~1e-3 (E = 256): a correct backward measured <= 3e-8, and 1e-6
  // separates that from any wrong term. The logits' margins (>= 0.02) keep the selection
  // fixed under the perturbation.
  for (const Shape& sh : kShapes) {
    if (sh.n * sh.e > 2000) continue;  // a finite difference per element
    for (int terms = 0; terms < 4; ++terms) {
      const bool with_c = (terms & 1) == 0, with_aux = (terms & 2) == 0;
      SCOPED_TRACE(sh.name() + (with_c ? " +dweight" : "") + (with_aux ? " +aux" : ""));
      const uint64_t seed = uint64_t(sh.n * 100 + sh.e * 10 + sh.k);
      const Tensor logits = separated_logits(sh.n, sh.e, seed);
      const Tensor c = with_c ? random_tensor({sh.n, sh.k}, DType::F64, seed + 1, -1, 1) : Tensor();
      const Tensor aux = with_aux ? random_tensor({sh.e}, DType::F64, seed + 2, -0.5, 0.5) : Tensor();
      const double z_scale = 0.07;
      const Routing r = route(logits, sh.k);
      const Tensor dlogits = Tensor::empty({sh.n, sh.e}, DType::F64);
      moe_router_backward(c, r.probs, r.lse, r.expert, r.weight, aux, z_scale, dlogits);
      const auto f = [&] { return router_loss(logits, sh.k, c, aux, z_scale); };
      EXPECT_LT(fd_rel_error(f, logits, dlogits, 1e-5, 512), 1e-6);
      // The selection must indeed not have moved under the probes.
      EXPECT_TRUE(same_bits(route(logits, sh.k).expert, r.expert));
    }
  }
}

TEST(OpMoeRouter, BackwardWithTiesAndRowStrides) {
  // Tied rows have no finite difference across the tie, but the backward is a formula of
  // the stored routing: a row-strided copy of the logits and a row-strided dlogits give the
  // packed results bit for bit.
  const int64_t n = 17, e = 5, k = 2;
  const Tensor logits = separated_logits(n, e, 3, true);
  const Tensor wide = Tensor::zeros({n, e + 3}, DType::F64);
  const Tensor strided = wide.narrow(1, 2, e);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < e; ++i) strided.set({t, i}, logits.get({t, i}));
  const Routing a = route(logits, k), b = route(strided, k);
  EXPECT_TRUE(same_bits(a.probs, b.probs));
  EXPECT_TRUE(same_bits(a.expert, b.expert));
  EXPECT_TRUE(same_bits(a.weight, b.weight));
  const Tensor c = random_tensor({n, k}, DType::F64, 4), aux = random_tensor({e}, DType::F64, 5);
  const Tensor packed = Tensor::empty({n, e}, DType::F64), out = Tensor::zeros({n, e + 1}, DType::F64);
  moe_router_backward(c, a.probs, a.lse, a.expert, a.weight, aux, 0.1, packed);
  moe_router_backward(c, a.probs, a.lse, a.expert, a.weight, aux, 0.1, out.narrow(1, 1, e));
  EXPECT_TRUE(same_bits(packed, out.narrow(1, 1, e)));
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(out.get({t, 0}), 0.0) << "wrote outside its columns, row " << t;
}

TEST(OpMoeRouter, Float32IsTheFloat64ComputationRoundedOnce) {
  // The CPU computes in double whatever the dtype, so the float32 probabilities, lse and
  // backward are exactly the float64 op's on the upcast inputs, rounded.
  const int64_t n = 29, e = 8, k = 2;
  const Tensor logits = random_tensor({n, e}, DType::F64, 11, -4, 4).to(DType::F32);
  const Routing r32 = route(logits, k), r64 = route(logits.to(DType::F64), k);
  EXPECT_TRUE(same_bits(r32.probs, r64.probs.to(DType::F32)));
  EXPECT_TRUE(same_bits(r32.lse, r64.lse.to(DType::F32)));
  EXPECT_TRUE(same_bits(r32.expert, r64.expert));  // random logits: no float32 near-ties
  const Tensor c = random_tensor({n, k}, DType::F64, 12).to(DType::F32);
  const Tensor aux = random_tensor({e}, DType::F64, 13).to(DType::F32);
  Tensor d32 = Tensor::empty({n, e}, DType::F32), d64 = Tensor::empty({n, e}, DType::F64);
  moe_router_backward(c, r32.probs, r32.lse, r32.expert, r32.weight, aux, 0.25, d32);
  moe_router_backward(c.to(DType::F64), r32.probs.to(DType::F64), r32.lse.to(DType::F64), r32.expert,
                      r32.weight.to(DType::F64), aux.to(DType::F64), 0.25, d64);
  EXPECT_TRUE(same_bits(d32, d64.to(DType::F32)));
}

TEST(OpMoeRouter, SameBitsEveryRunAndThreadCount) {
  // 2053 x 8 is above the parallel threshold; 3 threads do not divide the rows evenly.
  const int64_t n = 2053, e = 8, k = 2;
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor logits = random_tensor({n, e}, DType::F64, 21, -4, 4).to(dt);
    const DType s = stat_dtype(dt);
    const Tensor c = random_tensor({n, k}, DType::F64, 22).to(s), aux = random_tensor({e}, DType::F64, 23).to(s);
    const auto all_outputs = [&] {
      const Routing r = route(logits, k);
      const Stats st = stats_of(r);
      Tensor d = Tensor::empty({n, e}, dt);
      moe_router_backward(c, r.probs, r.lse, r.expert, r.weight, aux, 0.01, d);
      return std::vector<Tensor>{r.probs, r.lse, r.expert, r.weight, st.prob_sum, st.count, st.lse_sq, d};
    };
    const auto runs = under_thread_counts(all_outputs);
    const std::vector<Tensor> again = all_outputs();
    for (size_t i = 0; i < again.size(); ++i) {
      EXPECT_TRUE(same_bits(again[i], runs[0][i])) << dtype_name(dt) << " output " << i << ", second run";
      for (size_t r = 1; r < runs.size(); ++r)
        EXPECT_TRUE(same_bits(runs[r][i], runs[0][i])) << dtype_name(dt) << " output " << i << ", thread count " << r;
    }
  }
}

TEST(OpMoeRouter, NoTokensIsNoWork) {
  const Routing r = route(Tensor::empty({0, 8}, DType::F32), 2);
  const Stats st = stats_of(r);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(st.prob_sum.get({i}), 0.0);
    EXPECT_EQ(st.count.get({i}), 0.0);
  }
  EXPECT_EQ(st.lse_sq.get({0}), 0.0);
}

TEST(OpMoeRouter, BadArgumentsNameTheArgument) {
  const int64_t n = 3, e = 5, k = 2;
  const Tensor logits = random_tensor({n, e}, DType::F32, 31);
  const Routing r = route(logits, k);
  const Tensor d = Tensor::empty({n, e}, DType::F32);
  EXPECT_ERROR_MENTIONS(route(logits, 0), "k = 0");
  EXPECT_ERROR_MENTIONS(route(logits, 6), "k = 6");
  expect_error([&] { moe_router_forward(logits, k, Tensor::empty({n, e}, DType::F64), r.lse, r.expert, r.weight); },
               {"probs", "float32"});
  expect_error([&] { moe_router_forward(logits, k, r.probs, r.lse, Tensor::empty({n, 3}, DType::I32), r.weight); },
               {"expert"});
  expect_error([&] { moe_router_forward(logits, k, r.probs, r.lse, r.expert.to(DType::I64), r.weight); },
               {"expert", "int32"});
  expect_error([&] { moe_router_forward(logits, k, r.probs, Tensor::empty({n + 1}, DType::F32), r.expert, r.weight); },
               {"lse", "[3]"});
  expect_error([&] { moe_router_forward(logits.reshape({-1}), k, r.probs, r.lse, r.expert, r.weight); },
               {"logits", "2 dimensions"});
  expect_error([&] { moe_router_backward(Tensor(), r.probs, r.lse, r.expert, r.weight, Tensor(), 0.1,
                                         Tensor::empty({n, e}, DType::F64)); },
               {"dlogits", "probs"});
  expect_error([&] { moe_router_backward(Tensor::empty({n, k + 1}, DType::F32), r.probs, r.lse, r.expert, r.weight,
                                         Tensor(), 0.1, d); },
               {"dweight"});
  expect_error([&] { moe_router_backward(Tensor(), r.probs, r.lse, r.expert, r.weight,
                                         Tensor::empty({e + 1}, DType::F32), 0.1, d); },
               {"aux_grad"});
  // The CPU backend is the float32/float64 reference: 16-bit logits are refused by name.
  for (DType t : {DType::BF16, DType::F16}) {
    expect_error([&] { route(logits.to(t), k); }, {"moe_router_forward", dtype_name(t), "not implemented on the CPU"});
    expect_error([&] { moe_router_backward(Tensor(), r.probs, r.lse, r.expert, r.weight, Tensor(), 0.1,
                                           Tensor::empty({n, e}, t)); },
                 {"moe_router_backward", dtype_name(t), "not implemented on the CPU"});
  }
  // An expert id outside [0, E) in the statistics names the row.
  Tensor bad = r.expert.clone();
  bad.set({2, 1}, 7);
  const Tensor ps = Tensor::empty({e}, DType::F32), cnt = Tensor::empty({e}, DType::I32);
  expect_error([&] { moe_router_stats(r.probs, bad, r.lse, ps, cnt, Tensor::empty({1}, DType::F32)); },
               {"expert 7 at row 2", "[0, 5)"});
}

}  // namespace
}  // namespace fsdp::test
