// The CUDA MoE router (fsdp/ops/moe_router.h) against the CPU op: forward, statistics and
// backward (the forward also with a routing bias), in float64, float32, bfloat16 and float16, on odd shapes (one token, primes,
// one expert, k = E, E up to the CUDA limit of 1024), rows with exact ties, row-strided
// logits and dlogits, and the same bits on a second run. For the 16-bit types, which the
// CPU backend does not implement, the reference is the CPU float32 op on the exact upcast
// logits (backend_case.h).
//
// The chosen experts and the counts must be identical. Logits have clear margins between
// distinct values (or are exactly equal), so a last-ulp difference in exp cannot reorder
// a selection; exactly equal logits give exactly equal probabilities on both sides, which
// both break to the lower index.
//
// Tolerances (normalised MSE), and why. The GPU runs the CPU's loops in double for every
// dtype (src/ops/cuda/moe_router.cu), so what can differ is exp/log's last double ulp
// (libdevice against glibc; none in the emulator, which uses the host's) and, in the
// backward, FMA contraction: ~1e-16 relative in double, which flips a float32 rounding of
// a result once in ~2^29 values, by one ulp.
//   float64 1e-24 everywhere (a few double ulp: ~1e-32).
//   float32 probs, lse, weights, statistics and dlogits, and every 16-bit type's
//     stat-dtype outputs (float32): 1e-14 (a flipped float rounding moves one value by
//     2^-24 of itself: at most 2^-48 = 3.6e-15 of the squared norm).
//   dlogits bfloat16 1e-5, float16 1e-7 against the float32 reference rounded once: the
//     reference rounds double -> float32 -> 16-bit, the GPU once (round to odd), so a
//     double-rounding case flips one 16-bit rounding (2^-8, 2^-11 relative); a flip of
//     every element would be ~1.5e-5 and 2.4e-7.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/moe_router.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kStatTolerance{.f64 = 1e-24, .f32 = 1e-14, .bf16 = 1e-14, .f16 = 1e-14};
constexpr Tolerance kGradTolerance{.f64 = 1e-24, .f32 = 1e-14, .bf16 = 1e-5, .f16 = 1e-7};

struct Case {
  int64_t n, e, k;
  int64_t pad = 0;  // logits and dlogits as column slices of [n, e + pad] buffers
  std::string name() const {
    return "n=" + std::to_string(n) + " e=" + std::to_string(e) + " k=" + std::to_string(k) +
           (pad > 0 ? " strided" : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t n : {1, 7, 33, 130})
    for (auto [e, k] : {std::pair<int64_t, int64_t>{8, 1}, {8, 2}, {8, 8}, {5, 1}, {5, 2}, {5, 5}, {1, 1}})
      out.push_back({n, e, k, n == 33 ? 3 : 0});
  out.push_back({1031, 8, 2});  // a prime number of tokens over several blocks
  out.push_back({17, 64, 6, 1});
  out.push_back({5, 256, 8});
  out.push_back({3, 1024, 1024});  // the CUDA limit, every expert chosen
  return out;
}

// [n, e] logits (in a [n, e + pad] buffer, columns [pad, pad + e)) in dtype t. Rows hold a
// random order of values at least 3/4 of a step apart, spread over ~8; every fifth row
// holds three levels (multiples of 0.5, exact in every dtype) with exact ties.
Tensor router_logits(const Case& c, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double step = std::min(0.5, 8.0 / double(c.e));
  std::uniform_real_distribution<double> jitter(0, step / 4);
  Tensor full = Tensor::zeros({c.n, c.e + c.pad}, DType::F64);
  std::vector<int64_t> perm(static_cast<size_t>(c.e));
  for (int64_t r = 0; r < c.n; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < c.e; ++i) {
      const double v =
          r % 5 == 2 ? 0.5 * double((i * 7 + r) % 3) - 0.5 : step * double(perm[size_t(i)]) + jitter(rng) - 4;
      full.set({r, c.pad + i}, v);
    }
  }
  return full.to(t).narrow(1, c.pad, c.e);
}

struct Routed {
  Tensor probs, lse, expert, weight;
};

// `bias` (float32 [e] on the logits' device, or undefined): auxiliary-loss-free balancing.
Routed route(const Tensor& logits, int64_t k, const Tensor& bias = Tensor()) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const DType s = stat_dtype(logits.dtype());
  const Device d = logits.device();
  Routed r{Tensor::empty({n, e}, s, d), Tensor::empty({n}, s, d), Tensor::empty({n, k}, DType::I32, d),
           Tensor::empty({n, k}, s, d)};
  moe_router_forward(logits, k, r.probs, r.lse, r.expert, r.weight, bias);
  return r;
}

Routed to_device(const Routed& r, Device d) {
  return Routed{on_device(r.probs, d), on_device(r.lse, d), on_device(r.expert, d), on_device(r.weight, d)};
}

struct Stats {
  Tensor prob_sum, count, lse_sq;
};

Stats stats_of(const Routed& r) {
  const int64_t e = r.probs.size(1);
  const DType s = r.probs.dtype();
  const Device d = r.probs.device();
  Stats st{Tensor::empty({e}, s, d), Tensor::empty({e}, DType::I32, d), Tensor::empty({1}, s, d)};
  moe_router_stats(r.probs, r.expert, r.lse, st.prob_sum, st.count, st.lse_sq);
  return st;
}

Tensor on_device_or_none(const Tensor& t, Device d) { return t.defined() ? on_device(t, d) : Tensor(); }

// dlogits of `r` on r's device in dtype t, written into columns [pad, pad + e) of a zeroed
// [n, e + pad] buffer, which is returned whole.
Tensor backward_into(const Routed& r, const Tensor& dweight, const Tensor& aux, double z_scale, DType t,
                     int64_t pad) {
  const int64_t n = r.probs.size(0), e = r.probs.size(1);
  const Device d = r.probs.device();
  const Tensor full = Tensor::zeros({n, e + pad}, t, d);
  moe_router_backward(on_device_or_none(dweight, d), r.probs, r.lse, r.expert, r.weight, on_device_or_none(aux, d),
                      z_scale, full.narrow(1, pad, e));
  return full;
}

TEST_F(CudaOps, MoeRouterForwardMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const Tensor logits = router_logits(k, c.t, uint64_t(k.n * 1000 + k.e * 10 + k.k));
    const Routed want = route(logits.to(c.rt), k.k);
    const Tensor glogits = on_gpu(logits);
    const Routed got = route(glogits, k.k);
    EXPECT_TRUE(identical(on_cpu(got.expert), want.expert));
    EXPECT_LE(nmse(on_cpu(got.probs), want.probs), kStatTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(got.lse), want.lse), kStatTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(got.weight), want.weight), kStatTolerance(c.t));
    EXPECT_TRUE(identical(on_cpu(glogits), logits.clone())) << "the forward wrote its logits";
    // The statistics of the GPU's own routing: the same counts as the CPU's.
    EXPECT_TRUE(identical(on_cpu(stats_of(got).count), stats_of(want).count));
  });
}

// With a routing bias (model/router_bias.h) the GPU chooses the CPU's experts by
// probability + bias and weights them by the unbiased probabilities. The bias is random,
// of the size a trained one reaches (|b| up to ~0.3, probabilities ~1/E), so it moves many
// choices. p + b is one double addition of the same float32 p and b on both sides, so the
// scores are the same bits (up to exp's last ulp in p on a real GPU, as without a bias).
// Every third expert has no bias, so rows with exact ties still break them to the lower
// index.
TEST_F(CudaOps, MoeRouterForwardWithBiasMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const uint64_t seed = uint64_t(k.n * 1000 + k.e * 10 + k.k + 5);
    const Tensor logits = router_logits(k, c.t, seed);
    std::mt19937_64 rng(seed);
    Tensor bias = Tensor::empty({k.e}, DType::F32);
    for (int64_t i = 0; i < k.e; ++i) bias.set({i}, i % 3 == 0 ? 0.0 : double(int64_t(rng() % 601) - 300) / 1024.0);
    const Routed want = route(logits.to(c.rt), k.k, bias);
    const Routed got = route(on_gpu(logits), k.k, on_gpu(bias));
    EXPECT_TRUE(identical(on_cpu(got.expert), want.expert));
    EXPECT_LE(nmse(on_cpu(got.probs), want.probs), kStatTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(got.weight), want.weight), kStatTolerance(c.t));
  });
}

TEST_F(CudaOps, MoeRouterStatsMatchCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    if (c.t == DType::BF16 || c.t == DType::F16) return;  // the stats see only the stat dtype
    const Routed want = route(router_logits(k, c.t, uint64_t(k.n + k.e + k.k)).to(c.rt), k.k);
    const Stats cpu = stats_of(want), gpu = stats_of(to_device(want, kGpu));
    EXPECT_TRUE(identical(on_cpu(gpu.count), cpu.count));
    EXPECT_LE(nmse(on_cpu(gpu.prob_sum), cpu.prob_sum), kStatTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(gpu.lse_sq), cpu.lse_sq), kStatTolerance(c.t));
  });
}

TEST_F(CudaOps, MoeRouterBackwardMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const uint64_t seed = uint64_t(k.n * 7 + k.e * 3 + k.k);
    const Routed want = route(router_logits(k, c.t, seed).to(c.rt), k.k);
    const Routed gin = to_device(want, kGpu);  // the same routing on both sides
    const DType s = stat_dtype(c.t);
    const Tensor dweight = random_tensor({k.n, k.k}, DType::F64, seed + 1, -1, 1).to(s);
    const Tensor aux = random_tensor({k.e}, DType::F64, seed + 2, -0.5, 0.5).to(s);
    for (int terms = 0; terms < 4; ++terms) {
      const Tensor dw = (terms & 1) == 0 ? dweight : Tensor(), ag = (terms & 2) == 0 ? aux : Tensor();
      const double z_scale = terms == 3 ? 0.3 : 0.01;
      const Tensor ref = backward_into(want, dw, ag, z_scale, c.rt, 0);
      const Tensor got = on_cpu(backward_into(gin, dw, ag, z_scale, c.t, k.pad));
      const Tensor slice = got.narrow(1, k.pad, k.e).clone();
      EXPECT_LE(nmse(slice, rounded_to(ref, c.t)), kGradTolerance(c.t)) << "terms " << terms;
      for (int64_t r = 0; r < k.n; ++r)
        for (int64_t p = 0; p < k.pad; ++p) ASSERT_EQ(got.get({r, p}), 0.0) << "wrote outside its columns, row " << r;
    }
  });
}

TEST_F(CudaOps, MoeRouterGivesTheSameBitsTwice) {
  for (DType t : kFloatTypes) {
    const Case k{1031, 8, 2};
    const Tensor logits = on_gpu(router_logits(k, t, 9));
    const DType s = stat_dtype(t);
    const Tensor dweight = random_tensor({k.n, k.k}, DType::F64, 10).to(s);
    const Tensor aux = random_tensor({k.e}, DType::F64, 11).to(s);
    const auto run = [&] {
      const Routed r = route(logits, k.k);
      const Stats st = stats_of(r);
      const Tensor d = backward_into(r, dweight, aux, 0.05, t, 0);
      std::vector<Tensor> out;
      for (const Tensor& x : {r.probs, r.lse, r.expert, r.weight, st.prob_sum, st.count, st.lse_sq, d})
        out.push_back(on_cpu(x));
      return out;
    };
    const std::vector<Tensor> a = run(), b = run();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(identical(b[i], a[i])) << dtype_name(t) << " output " << i;
  }
}

TEST_F(CudaOps, MoeRouterRefusesMoreExpertsThanItTakes) {
  const Tensor logits = on_gpu(random_tensor({2, 1025}, DType::F64, 12).to(DType::F32));
  expect_error([&] { route(logits, 2); }, {"moe_router_forward", "1025 experts", "at most 1024"});
  const Routed cpu = route(on_cpu(logits), 2);
  const Routed gpu = to_device(cpu, kGpu);
  expect_error([&] { backward_into(gpu, Tensor(), Tensor(), 0.1, DType::F32, 0); },
               {"moe_router_backward", "1025 experts", "at most 1024"});
}

}  // namespace
}  // namespace fsdp::test
