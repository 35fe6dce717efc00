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

#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/rmsnorm.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-5, .f16 = 1e-7};
// rstd is float32 (float64 for float64) on both sides: the float32 bound for every 16-bit type.
constexpr Tolerance kRstdTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-12, .f16 = 1e-12};

// [n, c] rows inside a wider [n, c + pad] buffer when pad > 0.
Tensor rows_input(int64_t n, int64_t c, int64_t pad, DType t, uint64_t seed, Device d) {
  const Tensor full = on_device(random_tensor({n, c + pad}, DType::F64, seed, -2, 2).to(t), d);
  return full.narrow(1, pad / 2, c);
}

struct Case {
  int64_t n, c, pad;
  bool accumulate = false;  // the backward's mode
  std::string name() const {
    return "n=" + std::to_string(n) + " c=" + std::to_string(c) + (accumulate ? " accumulate" : "");
  }
};
const Case kCases[] = {{1, 1, 0}, {7, 5, 0}, {3, 31, 0}, {33, 33, 3}, {5, 1000, 0}, {2, 4099, 7}, {70, 17, 0}};

// Every case with both backward modes.
std::vector<Case> backward_cases() {
  std::vector<Case> out;
  for (Case k : kCases)
    for (bool accumulate : {false, true}) {
      k.accumulate = accumulate;
      out.push_back(k);
    }
  return out;
}

TEST_F(CudaOps, RmsNormForwardMatchesCpu) {
  for_each_backend_case(kCases, [](const BackendCase& c, const Case& k) {
    const Tensor x = rows_input(k.n, k.c, k.pad, c.t, 100 + uint64_t(k.c), Device::cpu());
    const Tensor w = input(k.c, c.t, 200 + uint64_t(k.c));
    Tensor y = Tensor::empty({k.n, k.c}, c.rt), rstd = Tensor::empty({k.n}, stat_dtype(c.t));
    rmsnorm_forward(x.to(c.rt), w.to(c.rt), y, rstd, 1e-5);

    const Tensor gx = rows_input(k.n, k.c, k.pad, c.t, 100 + uint64_t(k.c), kGpu);
    Tensor gy = Tensor::empty({k.n, k.c}, c.t, kGpu), grstd = Tensor::empty({k.n}, stat_dtype(c.t), kGpu);
    rmsnorm_forward(gx, on_gpu(w), gy, grstd, 1e-5);
    EXPECT_LE(nmse(on_cpu(gy), rounded_to(y, c.t)), kTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(grstd), rstd), kRstdTolerance(c.t));
  });
}

TEST_F(CudaOps, RmsNormBackwardMatchesCpu) {
  for_each_backend_case(backward_cases(), [](const BackendCase& c, const Case& k) {
    const uint64_t s = 300 + uint64_t(k.n * 7 + k.c);
    const Tensor x = rows_input(k.n, k.c, k.pad, c.t, s, Device::cpu());
    const Tensor dy = rows_input(k.n, k.c, k.pad, c.t, s + 1, Device::cpu());
    const Tensor w = input(k.c, c.t, s + 2), dw0 = input(k.c, c.t, s + 3), dx0 = input(k.n * k.c, c.t, s + 4);
    // The reference: rstd from the CPU forward, then the CPU backward.
    Tensor rstd = Tensor::empty({k.n}, stat_dtype(c.t)), y = Tensor::empty({k.n, k.c}, c.rt);
    rmsnorm_forward(x.to(c.rt), w.to(c.rt), y, rstd, 1e-6);
    Tensor dx = dx0.to(c.rt).reshape({k.n, k.c}), dw = dw0.to(c.rt);
    rmsnorm_backward(dy.to(c.rt), x.to(c.rt), w.to(c.rt), rstd, dx, dw, k.accumulate);

    Tensor gdx = on_gpu(dx0).reshape({k.n, k.c}), gdw = on_gpu(dw0);
    rmsnorm_backward(rows_input(k.n, k.c, k.pad, c.t, s + 1, kGpu), rows_input(k.n, k.c, k.pad, c.t, s, kGpu),
                     on_gpu(w), on_gpu(rstd), gdx, gdw, k.accumulate);
    EXPECT_LE(nmse(on_cpu(gdx), rounded_to(dx, c.t)), kTolerance(c.t));
    EXPECT_LE(nmse(on_cpu(gdw), rounded_to(dw, c.t)), kTolerance(c.t));
  });
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

// A frozen weight: without dw the kernels give the dx they give with it, bit for bit.
TEST_F(CudaOps, RmsNormBackwardWithoutDw) {
  const int64_t n = 9, c = 77;
  const Tensor x = input(n * c, DType::F32, 4).reshape({n, c}), w = input(c, DType::F32, 5);
  const Tensor dy = input(n * c, DType::F32, 6).reshape({n, c});
  Tensor rstd = Tensor::empty({n}, DType::F32), y = Tensor::empty({n, c}, DType::F32);
  rmsnorm_forward(x, w, y, rstd, 1e-5);
  Tensor with = Tensor::empty({n, c}, DType::F32, kGpu), without = Tensor::empty({n, c}, DType::F32, kGpu);
  rmsnorm_backward(on_gpu(dy), on_gpu(x), on_gpu(w), on_gpu(rstd), with, Tensor::zeros({c}, DType::F32, kGpu), false);
  rmsnorm_backward(on_gpu(dy), on_gpu(x), on_gpu(w), on_gpu(rstd), without, Tensor(), false);
  EXPECT_TRUE(identical(on_cpu(without), on_cpu(with)));
}

}  // namespace
}  // namespace fsdp::test
