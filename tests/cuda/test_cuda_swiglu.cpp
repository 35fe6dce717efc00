// CUDA SwiGLU against the CPU, forward and backward, with gate and up as the two column
// halves of one [N, 2F] buffer (as the fused GEMM leaves them), and the backward writing
// its gradients over that buffer in place. Tolerances (normalised MSE): float64 1e-26,
// float32 1e-12 (the GPU's expf may differ from glibc's by an ulp), bfloat16 1e-5
// (reference: float32 on the upcast inputs, rounded), float16 1e-7 (the same reference; a
// flipped rounding costs 2^-11 relative, every element flipping 2.4e-7; measured 0 in the
// emulator; gate values in [-6, 6] keep silu * up far below float16's 65504).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::test {
namespace {

double tolerance(DType t) {
  return t == DType::F64 ? 1e-26 : t == DType::F32 ? 1e-12 : t == DType::BF16 ? 1e-5 : 1e-7;
}

TEST_F(CudaOps, SwigluMatchesCpu) {
  for (DType t : kFloatTypes)
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(33)})
      for (int64_t f : {int64_t(1), int64_t(5), int64_t(100), int64_t(257)})
        for (bool in_place : {false, true}) {
          const DType rt = t == DType::F64 ? DType::F64 : DType::F32;
          const uint64_t seed = uint64_t(n * 1000 + f);
          const Tensor fused = random_tensor({n, 2 * f}, DType::F64, seed, -6, 6).to(t);
          const Tensor dout = random_tensor({n, f}, DType::F64, seed + 1, -2, 2).to(t);
          const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n) + " f=" +
                                   std::to_string(f) + (in_place ? " in place" : "");
          // Reference on the CPU.
          const Tensor rf = fused.to(rt), rd = dout.to(rt);
          const Tensor g = rf.narrow(1, 0, f), u = rf.narrow(1, f, f);
          Tensor out = Tensor::empty({n, f}, rt), dg = Tensor::empty({n, f}, rt), du = Tensor::empty({n, f}, rt);
          swiglu_forward(g, u, out);
          swiglu_backward(rd, g, u, dg, du);
          // CUDA.
          const Tensor gf = on_gpu(fused);
          const Tensor gg = gf.narrow(1, 0, f), gu = gf.narrow(1, f, f);
          Tensor gout = Tensor::empty({n, f}, t, kGpu);
          swiglu_forward(gg, gu, gout);
          EXPECT_LE(nmse(on_cpu(gout), t == rt ? out : out.to(t)), tolerance(t)) << what;
          if (in_place) {
            swiglu_backward(on_gpu(dout), gg, gu, gg, gu);
            const Tensor back = on_cpu(gf);
            EXPECT_LE(nmse(back.narrow(1, 0, f), t == rt ? dg : dg.to(t)), tolerance(t)) << what;
            EXPECT_LE(nmse(back.narrow(1, f, f), t == rt ? du : du.to(t)), tolerance(t)) << what;
          } else {
            Tensor gdg = Tensor::empty({n, f}, t, kGpu), gdu = Tensor::empty({n, f}, t, kGpu);
            swiglu_backward(on_gpu(dout), gg, gu, gdg, gdu);
            EXPECT_LE(nmse(on_cpu(gdg), t == rt ? dg : dg.to(t)), tolerance(t)) << what;
            EXPECT_LE(nmse(on_cpu(gdu), t == rt ? du : du.to(t)), tolerance(t)) << what;
          }
        }
}

}  // namespace
}  // namespace fsdp::test
