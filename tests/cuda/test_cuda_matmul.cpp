// CUDA matmul (cuBLASLt; in emulation the cuBLASLt stand-in) against the CPU GEMM: every
// transpose combination, alpha/beta with accumulation into c, row-strided operands (column
// slices of wider buffers), awkward shapes, float32, float64, bfloat16 and float16
// (reference: the CPU float32 GEMM on the exact upcast inputs, rounded), and beta == 0
// over a NaN c. Tolerances (normalised MSE): float64 1e-24 and float32 1e-12 (sums in
// another order; no TF32 unless asked for); bfloat16 1e-5 (fp32 accumulation, one bf16
// rounding); float16 1e-7 (fp32 accumulation, one float16 rounding at 2^-11 relative:
// every element flipping would be 2.4e-7; measured 8e-16 in the emulator, whose GEMM sums
// as the CPU's does; with k <= 4099 inputs in [-2, 2] stay far below 65504).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/matmul.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-24, .f32 = 1e-12, .bf16 = 1e-5, .f16 = 1e-7};

// A [rows, cols] operand stored as columns 2..cols+1 of a [rows, cols + 3] buffer, so its
// row stride exceeds its row length; the same view is taken of the buffer's device copy.
Tensor padded(int64_t rows, int64_t cols, DType t, uint64_t seed) {
  return random_tensor({rows, cols + 3}, DType::F64, seed, -1, 1).to(t);
}
Tensor view(const Tensor& buf) { return buf.narrow(1, 2, buf.size(1) - 3); }

struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 31, 100}};

struct Case {
  Shape s;
  bool ta, tb;
  double alpha, beta;
  std::string name() const {
    return "m" + std::to_string(s.m) + " n" + std::to_string(s.n) + " k" + std::to_string(s.k) + " ta" +
           std::to_string(int(ta)) + " tb" + std::to_string(int(tb)) + " beta " + std::to_string(beta);
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Shape& s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}})
          out.push_back({s, ta, tb, alpha, beta});
  return out;
}

TEST_F(CudaOps, MatmulMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const Shape& s = k.s;
    const uint64_t seed = uint64_t(s.m * 10000 + s.n * 100 + s.k + int(k.ta) * 7 + int(k.tb) * 13);
    const Tensor abuf = k.ta ? padded(s.k, s.m, c.t, seed) : padded(s.m, s.k, c.t, seed);
    const Tensor bbuf = k.tb ? padded(s.n, s.k, c.t, seed + 1) : padded(s.k, s.n, c.t, seed + 1);
    const Tensor cbuf = padded(s.m, s.n, c.t, seed + 2);
    Tensor want = view(cbuf).to(c.rt);
    matmul(view(abuf).to(c.rt), view(bbuf).to(c.rt), want, k.ta, k.tb, k.alpha, k.beta);

    const Tensor gcbuf = on_gpu(cbuf);
    matmul(view(on_gpu(abuf)), view(on_gpu(bbuf)), view(gcbuf), k.ta, k.tb, k.alpha, k.beta);
    const Tensor got = on_cpu(gcbuf);
    EXPECT_LE(nmse(view(got), rounded_to(want, c.t)), kTolerance(c.t));
    // The columns around the view are untouched.
    EXPECT_TRUE(identical(got.narrow(1, 0, 2).clone(), cbuf.narrow(1, 0, 2).clone()));
    EXPECT_TRUE(identical(got.narrow(1, s.n + 2, 1).clone(), cbuf.narrow(1, s.n + 2, 1).clone()));
  });
}

// train.tf32 (cuda::set_tf32): float32 GEMMs on the TF32 tensor cores. TF32 keeps 10
// mantissa bits, so products move by ~2^-11 relative: the result must stay within 1e-5
// (normalised MSE; each product's relative error <= 2^-10, random signs average it down)
// of the float32 GEMM and yet differ from it (proof the flag reached cuBLASLt; float32
// proper matches to 1e-12; measured 6.9e-8 in the emulator). Off again, the float32 result
// comes back.
TEST_F(CudaOps, MatmulUsesTf32OnlyWhenAskedFor) {
  const int64_t m = 37, n = 29, k = 300;
  const Tensor a = random_tensor({m, k}, DType::F32, 901, -1, 1), b = random_tensor({n, k}, DType::F32, 902, -1, 1);
  Tensor want = Tensor::zeros({m, n}, DType::F32);
  matmul(a, b, want, false, true);
  const Tensor ga = on_gpu(a), gb = on_gpu(b);
  auto run = [&] {
    Tensor c = Tensor::zeros({m, n}, DType::F32, kGpu);
    matmul(ga, gb, c, false, true);
    return on_cpu(c);
  };
  ASSERT_FALSE(cuda::tf32());
  EXPECT_LE(nmse(run(), want), 1e-12);
  cuda::set_tf32(true);
  const double err = nmse(run(), want);
  cuda::set_tf32(false);
  EXPECT_LE(err, 1e-5);
  EXPECT_GE(err, 1e-10) << "TF32 was asked for but the result is float32's";
  EXPECT_LE(nmse(run(), want), 1e-12);
  std::printf("TF32 matmul vs float32: nMSE %.1e\n", err);
}

TEST_F(CudaOps, MatmulBetaZeroIgnoresNanInC) {
  const Tensor a = input(12, DType::F32, 1).reshape({3, 4}), b = input(20, DType::F32, 2).reshape({4, 5});
  Tensor want = Tensor::empty({3, 5}, DType::F32);
  matmul(a, b, want, false, false);
  Tensor nan = Tensor::empty({3, 5}, DType::F32);
  nan.fill_(std::numeric_limits<double>::quiet_NaN());
  Tensor gc = on_gpu(nan);
  matmul(on_gpu(a), on_gpu(b), gc, false, false, 1.0, 0.0);
  EXPECT_LE(nmse(on_cpu(gc), want), 1e-12);
}

}  // namespace
}  // namespace fsdp::test
