// The CUDA MoE ops (token permutation, gather and combine; the router once more, inside the
// whole routing path, beside its own tests in test_cuda_moe_router.cpp) against the CPU ops,
// forward and backward, in float64, float32, bfloat16 and float16. Integer results (the
// chosen experts, the sort, the group offsets, the counts) must be identical.
//
// Tolerances (normalised MSE), and why:
//   float64  1e-24: both sides compute in double; only the order of a few sums may differ.
//   float32  1e-11: the CPU computes in double and rounds once; the GPU's gather and
//            combine sum in float (the router computes in double): ~1e-7 relative per
//            value (nmse ~1e-14), with room for an ulp of the device's math.
//   bfloat16 1e-5, float16 1e-7 for 16-bit outputs: the reference is the float32 CPU op on
//            the upcast inputs (exact), rounded to the type; one flipped rounding costs 2^-9
//            (2^-11) relative. Stat-dtype outputs (probabilities, weights, sums) are float32
//            for 16-bit data and held to the float32 bound. The routing weights enter
//            combine rounded to the data type on both sides (the reference gets them
//            pre-rounded), as transformers casts them.
#include <gtest/gtest.h>

#include <string>

#include "cuda_test_util.h"
#include "fsdp/ops/moe_permute.h"
#include "fsdp/ops/moe_router.h"

namespace fsdp::test {
namespace {

double tolerance(DType t) {
  return t == DType::F64 ? 1e-24 : t == DType::F32 ? 1e-11 : t == DType::BF16 ? 1e-5 : 1e-7;
}
double stat_tolerance(DType t) { return t == DType::F64 ? 1e-24 : 1e-11; }

DType ref_type(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

Tensor expert_ids(int64_t n, int64_t k, int64_t e, uint64_t seed) {
  const Tensor r = random_tensor({n * k}, DType::F64, seed, 0, 1);
  Tensor ids = Tensor::empty({n, k}, DType::I32);
  for (int64_t i = 0; i < n * k; ++i) ids.set_flat(i, double(int64_t(r.get_flat(i) * double(e)) % e));
  return ids;
}

struct Routed {
  Tensor probs, lse, expert, weight, prob_sum, count, lse_sq;
};

Routed route(const Tensor& logits, int64_t k, Device d) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const DType s = stat_dtype(logits.dtype());
  Routed r{Tensor::empty({n, e}, s, d), Tensor::empty({n}, s, d),     Tensor::empty({n, k}, DType::I32, d),
           Tensor::empty({n, k}, s, d), Tensor::empty({e}, s, d),     Tensor::empty({e}, DType::I32, d),
           Tensor::empty({1}, s, d)};
  moe_router_forward(logits, k, r.probs, r.lse, r.expert, r.weight);
  moe_router_stats(r.probs, r.expert, r.lse, r.prob_sum, r.count, r.lse_sq);
  return r;
}

TEST_F(CudaOps, MoeRouterMatchesCpu) {
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(130)})
      for (int64_t e : {int64_t(4), int64_t(5), int64_t(8)})
        for (int64_t k : {int64_t(1), int64_t(2), e}) {
          const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + " e=" +
                                   std::to_string(e) + " k=" + std::to_string(k);
          const uint64_t seed = uint64_t(n * 100 + e * 10 + k);
          const Tensor logits = random_tensor({n, e}, DType::F64, seed, -3, 3).to(t);
          const DType rt = ref_type(t);
          const Routed want = route(logits.to(rt), k, Device::cpu());
          const Routed got = route(on_gpu(logits), k, kGpu);
          EXPECT_TRUE(identical(on_cpu(got.expert), want.expert)) << what;
          EXPECT_TRUE(identical(on_cpu(got.count), want.count)) << what;
          EXPECT_LE(nmse(on_cpu(got.probs), want.probs), stat_tolerance(t)) << what;
          EXPECT_LE(nmse(on_cpu(got.lse), want.lse), stat_tolerance(t)) << what;
          EXPECT_LE(nmse(on_cpu(got.weight), want.weight), stat_tolerance(t)) << what;
          EXPECT_LE(nmse(on_cpu(got.prob_sum), want.prob_sum), stat_tolerance(t)) << what;
          EXPECT_LE(nmse(on_cpu(got.lse_sq), want.lse_sq), stat_tolerance(t)) << what;

          const DType s = stat_dtype(t);
          const Tensor dweight = random_tensor({n, k}, DType::F64, seed + 1, -1, 1).to(s);
          const Tensor aux = random_tensor({e}, DType::F64, seed + 2, 0, 0.5).to(s);
          Tensor dl_cpu = Tensor::empty({n, e}, rt);
          moe_router_backward(dweight, want.probs, want.lse, want.expert, want.weight, aux, 0.3, dl_cpu);
          Tensor dl_gpu = Tensor::empty({n, e}, t, kGpu);
          moe_router_backward(on_gpu(dweight), got.probs, got.lse, got.expert, got.weight, on_gpu(aux), 0.3, dl_gpu);
          EXPECT_LE(nmse(on_cpu(dl_gpu), t == rt ? dl_cpu : dl_cpu.to(t)), tolerance(t)) << what;
          // Without the upstream terms: only the z-loss.
          moe_router_backward(Tensor(), want.probs, want.lse, want.expert, want.weight, Tensor(), 0.3, dl_cpu);
          moe_router_backward(Tensor(), got.probs, got.lse, got.expert, got.weight, Tensor(), 0.3, dl_gpu);
          EXPECT_LE(nmse(on_cpu(dl_gpu), t == rt ? dl_cpu : dl_cpu.to(t)), tolerance(t)) << what << " z only";
        }
}

TEST_F(CudaOps, MoePermutePlanIsTheCpuStableSort) {
  for (int64_t n : {int64_t(1), int64_t(13), int64_t(300), int64_t(2049)})
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(4)})
      for (int64_t e : {int64_t(1), int64_t(4), int64_t(8), int64_t(64)}) {
        const Tensor ids = expert_ids(n, k, e, uint64_t(n + 10 * k + 100 * e));
        Tensor order = Tensor::empty({n * k}, DType::I32), slot = Tensor::empty({n * k}, DType::I32);
        Tensor offsets = Tensor::empty({e + 1}, DType::I32);
        moe_permute_plan(ids, e, order, slot, offsets);
        Tensor gorder = Tensor::empty({n * k}, DType::I32, kGpu), gslot = Tensor::empty({n * k}, DType::I32, kGpu);
        Tensor goffsets = Tensor::empty({e + 1}, DType::I32, kGpu);
        moe_permute_plan(on_gpu(ids), e, gorder, gslot, goffsets);
        const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " e=" + std::to_string(e);
        EXPECT_TRUE(identical(on_cpu(gorder), order)) << what;
        EXPECT_TRUE(identical(on_cpu(gslot), slot)) << what;
        EXPECT_TRUE(identical(on_cpu(goffsets), offsets)) << what;
      }
}

TEST_F(CudaOps, MoeGatherAndCombineMatchCpu) {
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t(1), int64_t(9), int64_t(40)})
      for (int64_t k : {int64_t(1), int64_t(2), int64_t(3)})
        for (int64_t c : {int64_t(1), int64_t(31), int64_t(130)}) {
          const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + " k=" +
                                   std::to_string(k) + " c=" + std::to_string(c);
          const uint64_t seed = uint64_t(n * 1000 + k * 100 + c);
          const int64_t e = 5, rows = n * k;
          const DType rt = ref_type(t), s = stat_dtype(t);
          const Tensor ids = expert_ids(n, k, e, seed);
          Tensor order = Tensor::empty({rows}, DType::I32), slot = Tensor::empty({rows}, DType::I32);
          Tensor offsets = Tensor::empty({e + 1}, DType::I32);
          moe_permute_plan(ids, e, order, slot, offsets);
          const Tensor x = random_tensor({n, c}, DType::F64, seed + 1, -2, 2).to(t);
          const Tensor ys = random_tensor({rows, c}, DType::F64, seed + 2, -2, 2).to(t);
          const Tensor dout = random_tensor({n, c}, DType::F64, seed + 3, -2, 2).to(t);
          const Tensor dxs = random_tensor({rows, c}, DType::F64, seed + 4, -2, 2).to(t);
          const Tensor weight = random_tensor({n, k}, DType::F64, seed + 5, 0, 1).to(s);
          // The reference multiplies by the weight as the data type rounds it.
          const Tensor wref = t == rt ? weight : weight.to(t).to(rt);
          auto expect_near = [&](const Tensor& gpu, const Tensor& cpu, const char* name) {
            EXPECT_LE(nmse(on_cpu(gpu), t == rt ? cpu : cpu.to(t)), tolerance(t)) << what << " " << name;
          };
          const Tensor go = on_gpu(order), gs = on_gpu(slot);

          Tensor xs = Tensor::empty({rows, c}, rt), gxs = Tensor::empty({rows, c}, t, kGpu);
          moe_gather_rows(x.to(rt), order, k, xs);
          moe_gather_rows(on_gpu(x), go, k, gxs);
          expect_near(gxs, xs, "gather");

          for (bool accumulate : {false, true}) {
            Tensor dx = x.to(rt).clone(), gdx = on_gpu(x);
            moe_gather_rows_backward(dxs.to(rt), slot, k, dx, accumulate);
            moe_gather_rows_backward(on_gpu(dxs), gs, k, gdx, accumulate);
            expect_near(gdx, dx, accumulate ? "gather backward, accumulating" : "gather backward");
          }

          Tensor out = Tensor::empty({n, c}, rt), gout = Tensor::empty({n, c}, t, kGpu);
          moe_combine(ys.to(rt), slot, wref, x.to(rt), out);
          moe_combine(on_gpu(ys), gs, on_gpu(weight), on_gpu(x), gout);
          expect_near(gout, out, "combine");
          Tensor in_place = on_gpu(x);  // residual aliasing out
          moe_combine(on_gpu(ys), gs, on_gpu(weight), in_place, in_place);
          expect_near(in_place, out, "combine in place");

          Tensor dys = Tensor::empty({rows, c}, rt), dw = Tensor::empty({n, k}, rt);
          Tensor gdys = Tensor::empty({rows, c}, t, kGpu), gdw = Tensor::empty({n, k}, s, kGpu);
          moe_combine_backward(dout.to(rt), ys.to(rt), slot, wref, dys, dw);
          moe_combine_backward(on_gpu(dout), on_gpu(ys), gs, on_gpu(weight), gdys, gdw);
          expect_near(gdys, dys, "combine backward dys");
          EXPECT_LE(nmse(on_cpu(gdw), dw), stat_tolerance(t) * 100) << what << " combine backward dweight";
        }
}

TEST_F(CudaOps, MoeOpsGiveTheSameBitsTwice) {
  const int64_t n = 257, k = 2, e = 8, c = 96;
  const Tensor logits = on_gpu(random_tensor({n, e}, DType::F64, 5, -3, 3).to(DType::BF16));
  const Routed a = route(logits, k, kGpu), b = route(logits, k, kGpu);
  EXPECT_TRUE(identical(on_cpu(a.prob_sum), on_cpu(b.prob_sum)));
  EXPECT_TRUE(identical(on_cpu(a.lse_sq), on_cpu(b.lse_sq)));
  Tensor order = Tensor::empty({n * k}, DType::I32, kGpu), slot = Tensor::empty({n * k}, DType::I32, kGpu);
  Tensor offsets = Tensor::empty({e + 1}, DType::I32, kGpu);
  moe_permute_plan(a.expert, e, order, slot, offsets);
  const Tensor ys = on_gpu(random_tensor({n * k, c}, DType::F64, 6, -2, 2).to(DType::BF16));
  const Tensor dout = on_gpu(random_tensor({n, c}, DType::F64, 7, -2, 2).to(DType::BF16));
  Tensor dys1 = Tensor::empty({n * k, c}, DType::BF16, kGpu), dys2 = Tensor::empty({n * k, c}, DType::BF16, kGpu);
  Tensor dw1 = Tensor::empty({n, k}, DType::F32, kGpu), dw2 = Tensor::empty({n, k}, DType::F32, kGpu);
  moe_combine_backward(dout, ys, slot, a.weight, dys1, dw1);
  moe_combine_backward(dout, ys, slot, a.weight, dys2, dw2);
  EXPECT_TRUE(identical(on_cpu(dw1), on_cpu(dw2)));
  EXPECT_TRUE(identical(on_cpu(dys1), on_cpu(dys2)));
}

}  // namespace
}  // namespace fsdp::test
