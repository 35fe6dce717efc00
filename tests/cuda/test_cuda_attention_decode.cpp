// CUDA decode-time attention against a KV cache, against the CPU op (the reference): the
// decode-step kernel (T < kDecodeTiledRows: flash-decoding over 512-position chunks, with
// one chunk or several and their combine, empty chunks included) and the tiled prefill
// (the flash forward with the cache as k and v), with pos 0 and pos > 0, GQA ratios 1, 2, 4,
// batch 1 and 3, head dims 8, 16, 64, 72, 136 (a bfloat16/float16 prefill at D = 64 takes
// the tensor-core forward, with q_pos > 0 and the cache's strides); the caches are one layer of a
// [2, B, KVH, S, D] buffer, and q, k_new, v_new views of one fused buffer. Cache positions past pos + T hold NaN on both sides: a kernel
// that read them would turn the output into NaN.
//
// Tolerances: the appended cache rows are copies, so bitwise; out as in
// test_cuda_attention.cpp (normalised MSE): float64 1e-24 and float32 1e-11 (summation
// order and exp's last ulp; the CPU's decode uses libm exp), bfloat16 1e-5 (reference: the
// CPU float32 op on the exact upcast inputs, rounded once; a 1e-7 difference can flip a
// bf16 rounding), float16 1e-7 (the same, a flip costing 2^-11 relative: every element
// flipping would be 2.4e-7). Measured: float64 <= 2e-30, float32 <= 6e-13, bfloat16 0
// (every output rounds to the reference's bf16 value), float16 <= 8e-10. The tensor-core
// prefill rounds P to 16 bits: test_cuda_attention.cpp's bounds, 3e-5 and 5e-7.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "../../src/ops/cuda/attention.cuh"         // attention_uses_tensor_cores
#include "../../src/ops/cuda/attention_decode.cuh"  // kDecodeTiledRows
#include "backend_case.h"
#include "fsdp/ops/attention.h"
#include "fsdp/ops/attention_decode.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-24, .f32 = 1e-11, .bf16 = 1e-5, .f16 = 1e-7};

double tolerance(DType t, int64_t D, bool prefill) {
  if (prefill && cuda::attention_uses_tensor_cores(t, D)) return t == DType::BF16 ? 3e-5 : 5e-7;
  return kTolerance(t);
}

struct Case {
  int64_t B, T, H, KVH, D, S, pos;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " KVH" +
           std::to_string(KVH) + " D" + std::to_string(D) + " S" + std::to_string(S) + " pos" + std::to_string(pos);
  }
};
const Case kCases[] = {
    {1, 1, 1, 1, 8, 5, 0},       // the first token
    {3, 1, 4, 2, 16, 40, 33},    // a decode step, batch 3, GQA 2
    {1, 7, 4, 1, 64, 300, 200},  // 7 rows past 200 cached: two 128-key tiles, GQA 4
    {1, 1, 2, 1, 136, 10, 9},    // head dim past 128 (two columns per thread)
    {1, 1, 4, 1, 64, 1500, 1200},  // a long cache: three 512-position chunks and their combine
    {2, 3, 2, 2, 16, 600, 510},    // rows of 511, 512, 513 keys: an empty chunk, a 1-key chunk
    {3, 33, 2, 1, 8, 40, 0},     // a prefill (tiled kernel) at pos 0
    {1, 20, 2, 2, 72, 64, 30},   // a prefill after 30 cached positions, 64 < D <= 128
    {1, 20, 4, 1, 64, 80, 50},   // a prefill after 50 cached positions, GQA 4: tensor cores for 16 bits
    {1, 100, 4, 2, 16, 128, 0},  // a long prefill: two 64-row tiles
};

// [2, B, KVH, S, D] (layer 1 is the cache under test), positions >= pos NaN, exact in t.
Tensor cache_buffer(const Case& c, DType t, uint64_t seed) {
  Tensor buf = random_tensor({2, c.B, c.KVH, c.S, c.D}, DType::F64, seed, -2, 2);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t g = 0; g < c.KVH; ++g)
        for (int64_t j = c.pos; j < c.S; ++j)
          for (int64_t d = 0; d < c.D; ++d) buf.set({l, b, g, j, d}, std::numeric_limits<double>::quiet_NaN());
  return buf.to(t);
}

struct Decode {
  Tensor out, kbuf, vbuf;
};

// attention_decode on whatever device the buffers are on.
Decode run(const Tensor& qkv, const Tensor& kbuf, const Tensor& vbuf, const Case& c, Device d) {
  Decode r{Tensor::empty({c.B, c.T, c.H, c.D}, qkv.dtype(), d), kbuf, vbuf};
  attention_decode(qkv.narrow(2, 0, c.H), qkv.narrow(2, c.H, c.KVH), qkv.narrow(2, c.H + c.KVH, c.KVH),
                   kbuf.select(0, 1), vbuf.select(0, 1), c.pos, r.out);
  return r;
}

// The cache positions the op defines: those before pos + T.
Tensor written(const Tensor& buf, const Case& c) { return buf.narrow(3, 0, c.pos + c.T).to(buf.dtype()); }

TEST_F(CudaOps, AttentionDecodeMatchesCpu) {
  for_each_backend_case(kCases, [](const BackendCase& b, const Case& c) {
    const DType t = b.t, rt = b.rt;
    const uint64_t seed = uint64_t(c.B * 7919 + c.T * 131 + c.D * 17 + c.pos);
    const Tensor qkv = random_tensor({c.B, c.T, c.H + 2 * c.KVH, c.D}, DType::F64, seed, -2, 2).to(t);
    const Tensor kbuf = cache_buffer(c, t, seed + 1), vbuf = cache_buffer(c, t, seed + 2);
    const Decode want = run(qkv.to(rt), kbuf.to(rt), vbuf.to(rt), c, Device::cpu());
    const bool prefill = c.T >= cuda::kDecodeTiledRows;
    const uint64_t tc_before = cuda::attention_tensor_core_launches();
    const Decode got = run(on_gpu(qkv), on_gpu(kbuf), on_gpu(vbuf), c, kGpu);
    EXPECT_EQ(cuda::attention_tensor_core_launches() - tc_before,
              prefill && cuda::attention_uses_tensor_cores(t, c.D) ? 1u : 0u);
    EXPECT_LE(nmse(on_cpu(got.out), want.out.to(t)), tolerance(t, c.D, prefill));
    EXPECT_TRUE(identical(written(on_cpu(got.kbuf), c), written(want.kbuf.to(t), c))) << "k_cache";
    EXPECT_TRUE(identical(written(on_cpu(got.vbuf), c), written(want.vbuf.to(t), c))) << "v_cache";
  });
}

// Prefill then one token at a time (both kernels) gives attention_forward's output over
// the whole sequence: float32, both on the GPU, summed in different orders.
TEST_F(CudaOps, AttentionDecodeStepsMatchForward) {
  const int64_t B = 2, T = 40, H = 4, KVH = 2, D = 16, prefill = 20;
  const Tensor qkv = on_gpu(random_tensor({B, T, H + 2 * KVH, D}, DType::F64, 5, -2, 2).to(DType::F32));
  const Tensor q = qkv.narrow(2, 0, H), k = qkv.narrow(2, H, KVH), v = qkv.narrow(2, H + KVH, KVH);
  Tensor want = Tensor::empty({B, T, H, D}, DType::F32, kGpu), lse = Tensor::empty({B, H, T}, DType::F32, kGpu);
  attention_forward(q, k, v, want, lse);

  const Tensor kc = on_gpu(Tensor::zeros({B, KVH, T, D}, DType::F32));
  const Tensor vc = on_gpu(Tensor::zeros({B, KVH, T, D}, DType::F32));
  Tensor got = Tensor::empty({B, T, H, D}, DType::F32, kGpu);
  for (int64_t p = 0, n = prefill; p < T; p += n, n = 1)
    attention_decode(q.narrow(1, p, n), k.narrow(1, p, n), v.narrow(1, p, n), kc, vc, p, got.narrow(1, p, n));
  EXPECT_LE(nmse(on_cpu(got), on_cpu(want)), 1e-11);
}

TEST_F(CudaOps, AttentionDecodeIsDeterministic) {
  const Case c{2, 3, 4, 1, 64, 200, 150};
  const Tensor qkv = on_gpu(random_tensor({c.B, c.T, c.H + 2 * c.KVH, c.D}, DType::F64, 3, -2, 2).to(DType::BF16));
  const Tensor kbuf = cache_buffer(c, DType::BF16, 4), vbuf = cache_buffer(c, DType::BF16, 5);
  const Decode a = run(qkv, on_gpu(kbuf), on_gpu(vbuf), c, kGpu), b = run(qkv, on_gpu(kbuf), on_gpu(vbuf), c, kGpu);
  EXPECT_TRUE(identical(on_cpu(a.out), on_cpu(b.out)));
}

}  // namespace
}  // namespace fsdp::test
