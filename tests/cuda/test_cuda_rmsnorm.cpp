// CUDA RMSNorm forward and backward against the CPU (the reference), on awkward shapes,
// strided rows (a column slice of a wider buffer), both backward modes, float32, float64,
// bfloat16 and float16. For the 16-bit types, which the CPU backend does not implement,
// the reference is the CPU float32 op on the (exact) upcast inputs.
//
// Tolerances (normalised MSE), and why:
//   float64  1e-24   the row sums are double on both sides, in different orders;
//   float32  1e-12   that order can move rstd, hence y and dx, by an ulp;
//   bfloat16 1e-5    a 1-ulp difference in float can flip a bf16 rounding (2^-8 relative);
//   float16  1e-7    the same flips at 2^-11 relative (a flip of every element would be
//                    2.4e-7; measured 0 in the emulator). Inputs in [-2, 2] are far from
//                    float16's 65504.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::test {
namespace {

double tolerance(DType t) {
  return t == DType::F64 ? 1e-24 : t == DType::F32 ? 1e-12 : t == DType::BF16 ? 1e-5 : 1e-7;
}
DType reference_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// [n, c] rows inside a wider [n, c + pad] buffer when pad > 0.
Tensor rows_input(int64_t n, int64_t c, int64_t pad, DType t, uint64_t seed, Device d) {
  const Tensor full = on_device(random_tensor({n, c + pad}, DType::F64, seed, -2, 2).to(t), d);
  return full.narrow(1, pad / 2, c);
}

struct Case {
  int64_t n, c, pad;
};
const Case kCases[] = {{1, 1, 0}, {7, 5, 0}, {3, 31, 0}, {33, 33, 3}, {5, 1000, 0}, {2, 4099, 7}, {70, 17, 0}};

TEST_F(CudaOps, RmsNormForwardMatchesCpu) {
  for (DType t : kFloatTypes)
    for (const Case& k : kCases) {
      const DType rt = reference_dtype(t);
      const Tensor x = rows_input(k.n, k.c, k.pad, t, 100 + uint64_t(k.c), Device::cpu());
      const Tensor w = input(k.c, t, 200 + uint64_t(k.c));
      Tensor y = Tensor::empty({k.n, k.c}, rt), rstd = Tensor::empty({k.n}, stat_dtype(t));
      rmsnorm_forward(x.to(rt), w.to(rt), y, rstd, 1e-5);

      const Tensor gx = rows_input(k.n, k.c, k.pad, t, 100 + uint64_t(k.c), kGpu);
      Tensor gy = Tensor::empty({k.n, k.c}, t, kGpu), grstd = Tensor::empty({k.n}, stat_dtype(t), kGpu);
      rmsnorm_forward(gx, on_gpu(w), gy, grstd, 1e-5);
      const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(k.n) + " c=" + std::to_string(k.c);
      EXPECT_LE(nmse(on_cpu(gy), t == rt ? y : y.to(t)), tolerance(t)) << what;
      EXPECT_LE(nmse(on_cpu(grstd), rstd), t == DType::F64 ? 1e-24 : 1e-12) << what;
    }
}

TEST_F(CudaOps, RmsNormBackwardMatchesCpu) {
  for (DType t : kFloatTypes)
    for (const Case& k : kCases)
      for (bool accumulate : {false, true}) {
        const DType rt = reference_dtype(t);
        const uint64_t s = 300 + uint64_t(k.n * 7 + k.c);
        const Tensor x = rows_input(k.n, k.c, k.pad, t, s, Device::cpu());
        const Tensor dy = rows_input(k.n, k.c, k.pad, t, s + 1, Device::cpu());
        const Tensor w = input(k.c, t, s + 2), dw0 = input(k.c, t, s + 3), dx0 = input(k.n * k.c, t, s + 4);
        // The reference: rstd from the CPU forward, then the CPU backward.
        Tensor rstd = Tensor::empty({k.n}, stat_dtype(t)), y = Tensor::empty({k.n, k.c}, rt);
        rmsnorm_forward(x.to(rt), w.to(rt), y, rstd, 1e-6);
        Tensor dx = dx0.to(rt).reshape({k.n, k.c}), dw = dw0.to(rt);
        rmsnorm_backward(dy.to(rt), x.to(rt), w.to(rt), rstd, dx, dw, accumulate);

        Tensor gdx = on_gpu(dx0).reshape({k.n, k.c}), gdw = on_gpu(dw0);
        rmsnorm_backward(rows_input(k.n, k.c, k.pad, t, s + 1, kGpu), rows_input(k.n, k.c, k.pad, t, s, kGpu),
                         on_gpu(w), on_gpu(rstd), gdx, gdw, accumulate);
        const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(k.n) + " c=" +
                                 std::to_string(k.c) + (accumulate ? " accumulate" : "");
        EXPECT_LE(nmse(on_cpu(gdx), t == rt ? dx : dx.to(t)), tolerance(t)) << what;
        EXPECT_LE(nmse(on_cpu(gdw), t == rt ? dw : dw.to(t)), tolerance(t)) << what;
      }
}

// dx may be dy itself (the residual stream's gradient updated in place).
TEST_F(CudaOps, RmsNormBackwardInPlace) {
  const int64_t n = 9, c = 77;
  const Tensor x = input(n * c, DType::F32, 1).reshape({n, c}), w = input(c, DType::F32, 2);
  const Tensor dy = input(n * c, DType::F32, 3).reshape({n, c});
  Tensor rstd = Tensor::empty({n}, DType::F32), y = Tensor::empty({n, c}, DType::F32);
  rmsnorm_forward(x, w, y, rstd, 1e-5);
  Tensor dx = Tensor::empty({n, c}, DType::F32), dw = Tensor::zeros({c}, DType::F32);
  rmsnorm_backward(dy, x, w, rstd, dx, dw, false);
  Tensor gdy = on_gpu(dy), gdw = Tensor::zeros({c}, DType::F32, Device::cuda(0));
  rmsnorm_backward(gdy, on_gpu(x), on_gpu(w), on_gpu(rstd), gdy, gdw, false);
  EXPECT_LE(nmse(on_cpu(gdy), dx), 1e-12);
  EXPECT_LE(nmse(on_cpu(gdw), dw), 1e-12);
}

}  // namespace
}  // namespace fsdp::test
