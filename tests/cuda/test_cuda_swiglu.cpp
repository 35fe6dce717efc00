// CUDA SwiGLU against the CPU, forward and backward, with gate and up as the two column
// halves of one [N, 2F] buffer (as the fused GEMM leaves them), and the backward writing
// its gradients over that buffer in place. Tolerances (normalised MSE): float64 1e-26,
// float32 1e-12 (the GPU's expf may differ from glibc's by an ulp), bfloat16 1e-5
// (reference: float32 on the upcast inputs, rounded), float16 1e-7 (the same reference; a
// flipped rounding costs 2^-11 relative, every element flipping 2.4e-7; measured 0 in the
// emulator; gate values in [-6, 6] keep silu * up far below float16's 65504).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-26, .f32 = 1e-12, .bf16 = 1e-5, .f16 = 1e-7};

struct Case {
  int64_t n, f;
  bool in_place;
  std::string name() const {
    return "n=" + std::to_string(n) + " f=" + std::to_string(f) + (in_place ? " in place" : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t n : {1, 7, 33})
    for (int64_t f : {1, 5, 100, 257})
      for (bool in_place : {false, true}) out.push_back({n, f, in_place});
  return out;
}

TEST_F(CudaOps, SwigluMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const int64_t n = k.n, f = k.f;
    const uint64_t seed = uint64_t(n * 1000 + f);
    const Tensor fused = random_tensor({n, 2 * f}, DType::F64, seed, -6, 6).to(c.t);
    const Tensor dout = random_tensor({n, f}, DType::F64, seed + 1, -2, 2).to(c.t);
    // Reference on the CPU.
    const Tensor rf = fused.to(c.rt), rd = dout.to(c.rt);
    const Tensor g = rf.narrow(1, 0, f), u = rf.narrow(1, f, f);
    Tensor out = Tensor::empty({n, f}, c.rt), dg = Tensor::empty({n, f}, c.rt), du = Tensor::empty({n, f}, c.rt);
    swiglu_forward(g, u, out);
    swiglu_backward(rd, g, u, dg, du);
    // CUDA.
    const Tensor gf = on_gpu(fused);
    const Tensor gg = gf.narrow(1, 0, f), gu = gf.narrow(1, f, f);
    Tensor gout = Tensor::empty({n, f}, c.t, kGpu);
    swiglu_forward(gg, gu, gout);
    EXPECT_LE(nmse(on_cpu(gout), rounded_to(out, c.t)), kTolerance(c.t));
    if (k.in_place) {
      swiglu_backward(on_gpu(dout), gg, gu, gg, gu);
      const Tensor back = on_cpu(gf);
      EXPECT_LE(nmse(back.narrow(1, 0, f), rounded_to(dg, c.t)), kTolerance(c.t));
      EXPECT_LE(nmse(back.narrow(1, f, f), rounded_to(du, c.t)), kTolerance(c.t));
    } else {
      Tensor gdg = Tensor::empty({n, f}, c.t, kGpu), gdu = Tensor::empty({n, f}, c.t, kGpu);
      swiglu_backward(on_gpu(dout), gg, gu, gdg, gdu);
      EXPECT_LE(nmse(on_cpu(gdg), rounded_to(dg, c.t)), kTolerance(c.t));
      EXPECT_LE(nmse(on_cpu(gdu), rounded_to(du, c.t)), kTolerance(c.t));
    }
  });
}

}  // namespace
}  // namespace fsdp::test
