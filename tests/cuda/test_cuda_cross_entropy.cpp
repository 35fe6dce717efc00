// CUDA fused softmax cross-entropy against the CPU: losses and gradients, forward-only and
// fused, in place over the logits, with ignored rows and large logits (the max
// subtraction), float32, float64, bfloat16 and float16 (reference: the CPU float32 op on
// the exact upcast logits; the 16-bit gradient is that reference rounded).
// Tolerances (normalised MSE): float64 1e-24; float32 1e-12 (the GPU's expf and log may
// differ from glibc's by an ulp or two); 16-bit losses 1e-12 (float32 losses computed in
// float from exact inputs, as the reference); bfloat16 gradients 1e-5 (one bf16 rounding
// may flip), float16 gradients 1e-7 (a flip costs 2^-11 relative instead of 2^-8: every
// element flipping would be 2.4e-7; measured 0 in the emulator; gradients are at most
// grad_scale in size, so float16's 65504 is no concern, and the logits in [-20, 20] are
// exact in float16).
// The vocabulary-parallel halves (cross_entropy_shard_stats / _finish) against the CPU's,
// on every shard of 1, 2 and 3, targets at every shard boundary and ignored rows: the
// statistics (m and x_t exact, s a double sum in another order of expf values that may
// differ by an ulp on a GPU: 1e-24 in float64, 1e-12 from float logits as above), then each shard's loss and gradient from the same gathered
// statistics, within the whole op's tolerances above; every shard's loss the same bits.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/cross_entropy.h"

namespace fsdp::test {
namespace {

Tensor random_targets(int64_t n, int64_t v, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor targets = Tensor::empty({n}, t);
  for (int64_t i = 0; i < n; ++i) targets.set_flat(i, i % 5 == 3 ? double(kIgnoreIndex) : double(rng() % uint64_t(v)));
  return targets;
}

constexpr Tolerance kLossTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-12, .f16 = 1e-12};
constexpr Tolerance kGradTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-5, .f16 = 1e-7};

struct Case {
  DType target_t;
  int64_t n, v;
  int mode;  // 0 forward only, 1 fused, 2 fused in place
  std::string name() const {
    return std::string(dtype_name(target_t)) + " targets n=" + std::to_string(n) + " v=" + std::to_string(v) +
           " mode " + std::to_string(mode);
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType target_t : {DType::I32, DType::I64})
    for (int64_t n : {1, 7, 33})
      for (int64_t v : {1, 5, 1000, 4099})
        for (int mode = 0; mode < 3; ++mode) out.push_back({target_t, n, v, mode});
  return out;
}

TEST_F(CudaOps, CrossEntropyMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    if (k.target_t == DType::I32 && c.t != DType::F32) return;  // index width is dtype-independent
    const int64_t n = k.n, v = k.v;
    const uint64_t seed = uint64_t(n * 10000 + v);
    const Tensor logits = random_tensor({n, v + 2}, DType::F64, seed, -20, 20).to(c.t).narrow(1, 1, v);
    const Tensor targets = random_targets(n, v, k.target_t, seed + 1);
    Tensor losses = Tensor::empty({n}, c.rt), dlogits = Tensor::empty({n, v}, c.rt);
    if (k.mode == 0) cross_entropy_forward(logits.to(c.rt), targets, losses);
    else cross_entropy_forward_backward(logits.to(c.rt), targets, losses, dlogits, 0.125);

    const Tensor glogits = on_gpu(logits.clone());
    const Tensor gtargets = on_gpu(targets);
    Tensor glosses = Tensor::empty({n}, c.rt, kGpu);
    if (k.mode == 0) {
      cross_entropy_forward(glogits, gtargets, glosses);
      EXPECT_TRUE(identical(on_cpu(glogits), logits.clone())) << "forward only changed the logits";
    } else {
      const Tensor gd = k.mode == 2 ? glogits : Tensor::empty({n, v}, c.t, kGpu);
      cross_entropy_forward_backward(glogits, gtargets, glosses, gd, 0.125);
      EXPECT_LE(nmse(on_cpu(gd), rounded_to(dlogits, c.t)), kGradTolerance(c.t));
    }
    EXPECT_LE(nmse(on_cpu(glosses), losses), kLossTolerance(c.t));
  });
}

struct ShardCase {
  int64_t n, shards, v;  // v: each shard's columns
  std::string name() const {
    return "n=" + std::to_string(n) + " shards=" + std::to_string(shards) + " v=" + std::to_string(v);
  }
};

std::vector<ShardCase> shard_cases() {
  std::vector<ShardCase> out;
  for (int64_t shards : {1, 2, 3})
    for (int64_t v : {1, 5, 300}) out.push_back({33, shards, v});
  return out;
}

// Targets over shards x v columns: every shard's first and last column and the columns
// beside them first, every fifth row ignored (random_targets).
Tensor boundary_targets(int64_t n, int64_t shards, int64_t v, DType target_t, uint64_t seed) {
  Tensor t = random_targets(n, shards * v, target_t, seed);
  int64_t i = 0;
  for (int64_t s = 0; s < shards; ++s)
    for (int64_t target : {s * v - 1, s * v, s * v + v - 1, s * v + v}) {
      if (i % 5 == 3) ++i;  // keep the ignored rows
      if (target >= 0 && target < shards * v && i < n) t.set_flat(i++, double(target));
    }
  return t;
}

constexpr Tolerance kStatsTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-12, .f16 = 1e-12};

// Each case: every shard's statistics, then every shard's finish forward only, fused, and
// fused in place over its logits.
TEST_F(CudaOps, CrossEntropyShardMatchesCpu) {
  for_each_backend_case(shard_cases(), [](const BackendCase& c, const ShardCase& k) {
    const int64_t n = k.n, v = k.v, vocab = k.shards * v;
    const uint64_t seed = uint64_t(n * 10000 + k.shards * 1000 + v);
    // int32 targets with float32 logits, int64 with the others (the index width is
    // independent of the dtype).
    const Tensor targets = boundary_targets(n, k.shards, v, c.t == DType::F32 ? DType::I32 : DType::I64, seed);
    const Tensor gtargets = on_gpu(targets);
    std::vector<Tensor> logits;  // each shard's, in the case's dtype
    Tensor all = Tensor::empty({k.shards, n, 3}, DType::F64);  // the CPU's statistics, stacked
    for (int64_t s = 0; s < k.shards; ++s) {
      logits.push_back(
          random_tensor({n, v + 2}, DType::F64, seed + 7 * uint64_t(s) + 1, -20, 20).to(c.t).narrow(1, 1, v));
      const Tensor mine = all.select(0, s);
      cross_entropy_shard_stats(logits.back().to(c.rt), targets, mine, s * v, vocab);
      Tensor gstats = Tensor::empty({n, 3}, DType::F64, kGpu);
      cross_entropy_shard_stats(on_gpu(logits.back().clone()).narrow(1, 0, v), gtargets, gstats, s * v, vocab);
      EXPECT_LE(nmse(on_cpu(gstats), mine), kStatsTolerance(c.t)) << "shard " << s << " statistics";
    }
    const Tensor gall = on_gpu(all);
    for (int mode = 0; mode < 3; ++mode) {
      Tensor loss0;
      for (int64_t s = 0; s < k.shards; ++s) {
        const std::string what = "mode " + std::to_string(mode) + " shard " + std::to_string(s);
        Tensor losses = Tensor::empty({n}, c.rt), dlogits = Tensor::empty({n, v}, c.rt);
        cross_entropy_shard_finish(logits[size_t(s)].to(c.rt), targets, all, losses, mode == 0 ? Tensor() : dlogits,
                                   0.125, s * v);
        const Tensor glogits = on_gpu(logits[size_t(s)].clone());
        Tensor glosses = Tensor::empty({n}, c.rt, kGpu);
        const Tensor gd = mode == 0 ? Tensor() : mode == 2 ? glogits : Tensor::empty({n, v}, c.t, kGpu);
        cross_entropy_shard_finish(glogits, gtargets, gall, glosses, gd, 0.125, s * v);
        if (mode == 0) EXPECT_TRUE(identical(on_cpu(glogits), logits[size_t(s)].clone())) << what << ": wrote";
        else EXPECT_LE(nmse(on_cpu(gd), rounded_to(dlogits, c.t)), kGradTolerance(c.t)) << what;
        const Tensor got = on_cpu(glosses);
        EXPECT_LE(nmse(got, losses), kLossTolerance(c.t)) << what;
        if (s == 0) loss0 = got;
        else EXPECT_TRUE(identical(got, loss0)) << what << ": the loss differs from shard 0's";
      }
    }
  });
}

// A target outside the whole vocabulary is the statistics' error at the next read-back;
// its row gets an ignored row's statistics. A target of another shard is no error.
TEST_F(CudaOps, CrossEntropyShardReportsBadTargets) {
  Tensor targets = random_targets(6, 10, DType::I64, 3);
  targets.set_flat(4, 10);
  const Tensor logits = random_tensor({6, 5}, DType::F32, 4);  // columns [5, 10) of 10
  Tensor stats = Tensor::empty({6, 3}, DType::F64, kGpu);
  cross_entropy_shard_stats(on_gpu(logits), on_gpu(targets), stats, 5, 10);
  expect_error([&] { (void)on_cpu(stats); },
               {"cross_entropy_shard_stats", "target 10 at row 4 is outside [0, 10) and is not ignore_index (-100)",
                "cuda:0"});
  const Tensor got = on_cpu(stats);
  EXPECT_EQ(got.get({4, 0}), 0.0);
  EXPECT_EQ(got.get({4, 1}), 1.0);
  EXPECT_EQ(got.get({4, 2}), 0.0);
}

// Note [Device error record]: a bad target does not stop the op; its row is treated as
// ignored (loss 0, zero gradient), the others are computed, and the next read-back (the
// loss's) raises the CPU's message and clears the record, so the next correct call works.
TEST_F(CudaOps, CrossEntropyReportsBadTargetsAtTheNextReadBack) {
  Tensor targets = random_targets(6, 10, DType::I64, 1);
  targets.set_flat(4, 10);
  const Tensor logits = random_tensor({6, 10}, DType::F32, 2);
  const Tensor glogits = on_gpu(logits);
  Tensor losses = Tensor::empty({6}, DType::F32, kGpu), dlogits = Tensor::empty({6, 10}, DType::F32, kGpu);
  cross_entropy_forward_backward(glogits, on_gpu(targets), losses, dlogits, 1.0);
  expect_error([&] { (void)on_cpu(losses); },
               {"cross_entropy", "target 10 at row 4 is outside [0, 10) and is not ignore_index (-100)", "cuda:0",
                "next read-back"});
  const Tensor got = on_cpu(losses), dgot = on_cpu(dlogits);
  Tensor fixed = targets.clone();
  fixed.set_flat(4, double(kIgnoreIndex));  // what the kernel made of row 4
  Tensor want = Tensor::empty({6}, DType::F32), dwant = Tensor::empty({6, 10}, DType::F32);
  cross_entropy_forward_backward(logits, fixed, want, dwant, 1.0);
  EXPECT_LE(nmse(got, want), 1e-12);
  EXPECT_LE(nmse(dgot, dwant), 1e-12);
  EXPECT_EQ(got.get_flat(4), 0.0);

  fixed.set_flat(4, 3);
  cross_entropy_forward(glogits, on_gpu(fixed), losses);
  cross_entropy_forward(logits, fixed, want);
  EXPECT_LE(nmse(on_cpu(losses), want), 1e-12);
}

// Forward and fused: the op enqueues one kernel and returns, without a wait of the host;
// the loss read-back after it costs the copy's own two waits, the record riding along.
TEST_F(CudaOps, CrossEntropyDoesNotWaitForTheDevice) {
  if (!can_count_host_waits()) GTEST_SKIP() << "counts the emulator's host-blocking calls";
  const Tensor logits = on_gpu(random_tensor({7, 100}, DType::F32, 5));
  const Tensor targets = on_gpu(random_targets(7, 100, DType::I64, 6));
  Tensor losses = Tensor::empty({7}, DType::F32, kGpu), dlogits = Tensor::empty({7, 100}, DType::F32, kGpu);
  cross_entropy_forward(logits, targets, losses);  // the first use of the record creates it, with one wait
  cuda::synchronize(0);
  const unsigned long long before = host_waits();
  cross_entropy_forward(logits, targets, losses);
  cross_entropy_forward_backward(logits, targets, losses, dlogits, 0.5);
  EXPECT_EQ(host_waits(), before);
  (void)on_cpu(losses);
  EXPECT_EQ(host_waits(), before + 2);
}

}  // namespace
}  // namespace fsdp::test
