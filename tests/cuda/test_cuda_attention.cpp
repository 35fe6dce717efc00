// CUDA causal GQA attention, forward and backward, against the CPU op (the reference) on
// awkward shapes: T = 1, 7, 20, 33, 40, 65, 80, 100 (one, part of, and several kernel
// tiles), head dims 8, 16, 64, 72, 128, 136 (each FMA kernel configuration: D <= 64, <= 128,
// <= 256; and the tensor-core kernels of bfloat16 and float16 at D = 64 and 128), GQA ratios
// 1, 2, 4, batch 1, 2 and 3; q, k, v (and dq, dk, dv) are strided views of one fused
// [B, T, H + 2 KVH, D] buffer, as in the model. float32, float64, bfloat16 and float16;
// for the 16-bit types, which the CPU backend does not implement, the reference is the CPU
// float32 op on the exact upcast inputs, rounded once to the 16-bit type at the end.
// AttentionTakesTheTensorCorePath checks which kernels ran for which dtype and head dim.
//
// Tolerances (normalised MSE), and why:
//   float64  1e-24  both in double; summation order (BLAS tiles vs one thread's loop) and
//                   exp's last ulp differ (measured <= 4e-31);
//   float32  1e-11  the CPU's exp is a Cephes polynomial (1.4 ulp), the GPU's expf, and the
//                   summation orders differ; dS = P (dP - delta) cancels, which costs a
//                   few more bits in the gradients (measured <= 2e-13);
//   bfloat16 1e-5   the float results agree to ~1e-7 relative, and a difference that small
//                   flips a bf16 rounding (2^-8 relative) now and then (measured <= 7e-11
//                   on these seeds; the bound is one flip in a few hundred elements);
//                   lse stays float32: the float32 bound;
//   float16  1e-7   the same flips at 2^-11 relative instead of 2^-8 (every element
//                   flipping would be 2.4e-7; measured <= 2.1e-10 forward and 1.3e-10
//                   backward); inputs in [-2, 2] and softmax weights keep every value far
//                   below float16's 65504.
// The tensor-core kernels (bfloat16, float16 with D = 64, 128) round P (and dS in the
// backward) to the 16-bit type as WMMA operands, a relative error of up to 2^-9 (bf16) or
// 2^-12 (fp16) per term, as large as the final rounding of the result: most elements' float
// values move by up to about one rounding step, and flip accordingly. Every element one
// step off is about 2^-15 (bf16) and 2^-21 (fp16) normalised MSE, the bounds:
//   bfloat16 3e-5   measured 2.5e-6 .. 3.3e-6 forward, 5.4e-6 .. 7.8e-6 backward;
//   float16  5e-7   measured 3.8e-8 .. 4.8e-8 forward, 9.8e-8 .. 1.2e-7 backward;
//                   lse sums the float P: the float32 bound, as above.
// With T = 1 the exact dq and dk are 0 (dP - delta = dO.v - dO.v), so both sides hold only
// rounding noise and a relative error means nothing: they are held to |x| <= 1e-4 instead
// (two length-D dot products of O(1) values subtracted, in float).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../src/ops/cuda/attention.cuh"  // which path runs: attention_uses_tensor_cores
#include "backend_case.h"
#include "fsdp/ops/attention.h"

namespace fsdp::test {
namespace {

bool tensor_cores(DType t, int64_t D) { return cuda::attention_uses_tensor_cores(t, D); }

constexpr Tolerance kTolerance{.f64 = 1e-24, .f32 = 1e-11, .bf16 = 1e-5, .f16 = 1e-7};
constexpr Tolerance kLseTolerance{.f64 = 1e-24, .f32 = 1e-11, .bf16 = 1e-11, .f16 = 1e-11};

double tolerance(DType t, int64_t D) {
  if (tensor_cores(t, D)) return t == DType::BF16 ? 3e-5 : 5e-7;
  return kTolerance(t);
}

struct Shape {
  int64_t B, T, H, KVH, D;
  bool sixteen_bit_only = false;  // the tensor-core shapes: float32/float64 there would only cost emulator time
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " KVH" +
           std::to_string(KVH) + " D" + std::to_string(D);
  }
};
const Shape kShapes[] = {
    {1, 1, 1, 1, 8},     // one row, one key
    {3, 7, 4, 2, 16},    // batch 3, GQA 2, part of a tile
    {1, 33, 4, 1, 64},   // GQA 4, a tile and one row (float64: two 32-row tiles and one row)
    {1, 100, 2, 2, 16},  // two 64-row tiles, the last partial; GQA 1
    {3, 33, 2, 1, 8},    // batch 3, GQA 2
    {1, 40, 2, 1, 72},   // 64 < D <= 128
    {1, 20, 1, 1, 136},  // 128 < D <= 256
    // The 16-bit types' tensor-core head dims, on 64-row tiles: two tiles, the last of one row;
    // two tiles, the last partial, GQA 1 and (batch 2) GQA 4.
    {1, 65, 2, 2, 64, true},
    {1, 100, 2, 2, 128, true},
    {2, 80, 4, 1, 128, true},
};

std::string name(DType t, const Shape& s) { return std::string(dtype_name(t)) + " " + s.name(); }

// Views of heads [h0, h0 + n) of a [B, T, heads, D] buffer.
Tensor heads(const Tensor& buf, int64_t h0, int64_t n) { return buf.narrow(2, h0, n); }
Tensor q_of(const Tensor& buf, const Shape& s) { return heads(buf, 0, s.H); }
Tensor k_of(const Tensor& buf, const Shape& s) { return heads(buf, s.H, s.KVH); }
Tensor v_of(const Tensor& buf, const Shape& s) { return heads(buf, s.H + s.KVH, s.KVH); }

// The fused [B, T, H + 2 KVH, D] buffer, values in [-2, 2) exact in t.
Tensor fused(const Shape& s, DType t, uint64_t seed) {
  return random_tensor({s.B, s.T, s.H + 2 * s.KVH, s.D}, DType::F64, seed, -2, 2).to(t);
}

double max_abs(const Tensor& x) {
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::abs(x.get_flat(i)));
  return m;
}

uint64_t seed_of(const Shape& s) { return uint64_t(s.B * 1000003 + s.T * 1009 + s.H * 101 + s.KVH * 11 + s.D); }

struct Forward {
  Tensor out, lse;
};

Forward gpu_forward(const Tensor& gbuf, const Shape& s, DType t) {
  Forward f{Tensor::empty({s.B, s.T, s.H, s.D}, t, kGpu), Tensor::empty({s.B, s.H, s.T}, stat_dtype(t), kGpu)};
  attention_forward(q_of(gbuf, s), k_of(gbuf, s), v_of(gbuf, s), f.out, f.lse);
  return f;
}

// dq, dk, dv as views of one fused gradient buffer on the GPU; returns that buffer.
Tensor gpu_backward(const Tensor& gdout, const Tensor& gbuf, const Tensor& gout, const Tensor& glse, const Shape& s,
                    DType t) {
  Tensor grad = Tensor::empty({s.B, s.T, s.H + 2 * s.KVH, s.D}, t, kGpu);
  attention_backward(gdout, q_of(gbuf, s), k_of(gbuf, s), v_of(gbuf, s), gout, glse, q_of(grad, s), k_of(grad, s),
                     v_of(grad, s));
  return grad;
}

// The tensor-core shapes run only in the 16-bit types.
bool skipped(const BackendCase& c, const Shape& s) {
  return s.sixteen_bit_only && (c.t == DType::F32 || c.t == DType::F64);
}

TEST_F(CudaOps, AttentionForwardMatchesCpu) {
  for_each_backend_case(kShapes, [](const BackendCase& c, const Shape& s) {
    if (skipped(c, s)) return;
    const Tensor buf = fused(s, c.t, seed_of(s));
    const Tensor cbuf = buf.to(c.rt);
    Tensor out = Tensor::empty({s.B, s.T, s.H, s.D}, c.rt), lse = Tensor::empty({s.B, s.H, s.T}, stat_dtype(c.t));
    attention_forward(q_of(cbuf, s), k_of(cbuf, s), v_of(cbuf, s), out, lse);

    const Forward g = gpu_forward(on_gpu(buf), s, c.t);
    EXPECT_LE(nmse(on_cpu(g.out), rounded_to(out, c.t)), tolerance(c.t, s.D));
    EXPECT_LE(nmse(on_cpu(g.lse), lse), kLseTolerance(c.t));
  });
}

TEST_F(CudaOps, AttentionBackwardMatchesCpu) {
  for_each_backend_case(kShapes, [](const BackendCase& c, const Shape& s) {
    if (skipped(c, s)) return;
    const DType t = c.t;
    const Tensor buf = fused(s, t, seed_of(s));
    const Tensor cbuf = buf.to(c.rt);
    const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, seed_of(s) + 1, -2, 2).to(t);
    // Both sides get the same out (the CPU's, rounded to t) and lse.
    Tensor out = Tensor::empty({s.B, s.T, s.H, s.D}, c.rt), lse = Tensor::empty({s.B, s.H, s.T}, stat_dtype(t));
    attention_forward(q_of(cbuf, s), k_of(cbuf, s), v_of(cbuf, s), out, lse);
    const Tensor out_t = out.to(t);
    Tensor grad = Tensor::empty({s.B, s.T, s.H + 2 * s.KVH, s.D}, c.rt);
    attention_backward(dout.to(c.rt), q_of(cbuf, s), k_of(cbuf, s), v_of(cbuf, s), out_t.to(c.rt), lse, q_of(grad, s),
                       k_of(grad, s), v_of(grad, s));
    const Tensor want = rounded_to(grad, t);

    const Tensor got = on_cpu(gpu_backward(on_gpu(dout), on_gpu(buf), on_gpu(out_t), on_gpu(lse), s, t));
    if (s.T == 1) {
      EXPECT_LE(max_abs(q_of(got, s).to(t)), 1e-4) << "dq";
      EXPECT_LE(max_abs(k_of(got, s).to(t)), 1e-4) << "dk";
    } else {
      EXPECT_LE(nmse(q_of(got, s).to(t), q_of(want, s).to(t)), tolerance(t, s.D)) << "dq";
      EXPECT_LE(nmse(k_of(got, s).to(t), k_of(want, s).to(t)), tolerance(t, s.D)) << "dk";
    }
    EXPECT_LE(nmse(v_of(got, s).to(t), v_of(want, s).to(t)), tolerance(t, s.D)) << "dv";
  });
}

// No atomics and a fixed order of every sum: two runs give the same bits. The 16-bit types
// on the tensor-core kernels, D = 64 and 128, on smaller shapes: their warp collectives
// cost the emulator about four times the FMA kernels' time.
TEST_F(CudaOps, AttentionIsDeterministic) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (const Shape& s : t == DType::F32 ? std::vector<Shape>{{3, 100, 4, 1, 64}}
                                          : std::vector<Shape>{{1, 100, 4, 1, 64}, {1, 70, 2, 1, 128}}) {
      const Tensor gbuf = on_gpu(fused(s, t, 7));
      const Tensor gdout = on_gpu(random_tensor({s.B, s.T, s.H, s.D}, DType::F64, 8, -2, 2).to(t));
      const Forward f1 = gpu_forward(gbuf, s, t), f2 = gpu_forward(gbuf, s, t);
      EXPECT_TRUE(identical(on_cpu(f1.out), on_cpu(f2.out))) << name(t, s);
      EXPECT_TRUE(identical(on_cpu(f1.lse), on_cpu(f2.lse))) << name(t, s);
      const Tensor g1 = gpu_backward(gdout, gbuf, f1.out, f1.lse, s, t);
      const Tensor g2 = gpu_backward(gdout, gbuf, f1.out, f1.lse, s, t);
      EXPECT_TRUE(identical(on_cpu(g1), on_cpu(g2))) << name(t, s);
    }
}

// bfloat16 and float16 with D = 64 or 128 run on the tensor-core kernels (one forward
// launch, two backward), everything else on the FMA kernels: counted launches, so a
// dispatch change that silently dropped the tensor-core path (and left the tolerances
// above testing only the FMA kernels) fails here.
TEST_F(CudaOps, AttentionTakesTheTensorCorePath) {
  for (DType t : kFloatTypes)
    for (int64_t D : {16, 64, 72, 128, 136}) {
      const bool want = (t == DType::BF16 || t == DType::F16) && (D == 64 || D == 128);
      EXPECT_EQ(tensor_cores(t, D), want) << dtype_name(t) << " D" << D;
      const Shape s{1, 3, 2, 1, D};
      const Tensor gbuf = on_gpu(fused(s, t, 3));
      const uint64_t before = cuda::attention_tensor_core_launches();
      const Forward f = gpu_forward(gbuf, s, t);
      EXPECT_EQ(cuda::attention_tensor_core_launches() - before, want ? 1u : 0u) << dtype_name(t) << " D" << D;
      gpu_backward(on_gpu(random_tensor({s.B, s.T, s.H, s.D}, DType::F64, 4, -2, 2).to(t)), gbuf, f.out, f.lse, s, t);
      EXPECT_EQ(cuda::attention_tensor_core_launches() - before, want ? 3u : 0u) << dtype_name(t) << " D" << D;
    }
}

TEST_F(CudaOps, AttentionRejectsWhatItDoesNotImplement) {
  const Shape s{1, 3, 1, 1, 257};  // head dim past the kernels' 256
  const Tensor gbuf = on_gpu(fused(s, DType::F32, 1));
  EXPECT_THROW(gpu_forward(gbuf, s, DType::F32), Error);
}

}  // namespace
}  // namespace fsdp::test
