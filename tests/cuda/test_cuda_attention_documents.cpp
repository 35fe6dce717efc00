// CUDA document-masked attention (Note [Document masking] in fsdp/ops/attention.h) against
// the CPU op with the same doc_start, forward and backward, in float32, float64, bfloat16
// and float16, on the FMA kernels (D = 16: every configuration's tiling is the same code)
// and the tensor-core kernels (bfloat16 and float16 at D = 64): layouts with one-token
// documents, a document filling a row, a boundary on a tile edge (so whole key tiles are
// skipped, forward and in both backward passes) and random ones; and a leading document of
// NaN that no later tile may read. The tolerances are test_cuda_attention.cpp's, for the
// same kernels and reasons (this file changes only which keys each row sees).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../src/ops/cuda/attention.cuh"  // attention_uses_tensor_cores
#include "../common/document_layouts.h"
#include "backend_case.h"
#include "fsdp/ops/attention.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-24, .f32 = 1e-11, .bf16 = 1e-5, .f16 = 1e-7};
constexpr Tolerance kLseTolerance{.f64 = 1e-24, .f32 = 1e-11, .bf16 = 1e-11, .f16 = 1e-11};

double tolerance(DType t, int64_t D) {
  if (cuda::attention_uses_tensor_cores(t, D)) return t == DType::BF16 ? 3e-5 : 5e-7;
  return kTolerance(t);
}

struct Case {
  int64_t B, T, H, KVH, D;
  DocumentLayout layout;
  bool sixteen_bit_only = false;  // the tensor-core head dim: float32/float64 would only cost emulator time
  std::string name() const {
    std::string r = "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " KVH" +
                    std::to_string(KVH) + " D" + std::to_string(D) + " documents";
    for (const auto& row : layout.starts) r += " " + std::to_string(row.size());
    return r;
  }
};

// Row 0: a boundary at 64 (the FMA float32 and tensor-core tile; two float64 tiles of 32),
// one-token documents; row 1: random. Then a document filling its row, and every token a
// document of its own.
const std::vector<Case>& cases() {
  static const std::vector<Case> c = [] {
    DocumentLayout two_rows = random_layout(2, 80, 0.1, 3);
    two_rows.starts[0] = {0, 1, 40, 64, 65, 79};
    return std::vector<Case>{
        {2, 80, 2, 1, 16, two_rows},
        {1, 20, 4, 2, 16, random_layout(1, 20, 0.0, 1)},
        {1, 9, 2, 2, 16, random_layout(1, 9, 1.0, 2)},
        {2, 80, 2, 1, 64, two_rows, true},
    };
  }();
  return c;
}

Tensor fused(const Case& s, DType t, uint64_t seed) {
  return random_tensor({s.B, s.T, s.H + 2 * s.KVH, s.D}, DType::F64, seed, -2, 2).to(t);
}
Tensor q_of(const Tensor& buf, const Case& s) { return buf.narrow(2, 0, s.H); }
Tensor k_of(const Tensor& buf, const Case& s) { return buf.narrow(2, s.H, s.KVH); }
Tensor v_of(const Tensor& buf, const Case& s) { return buf.narrow(2, s.H + s.KVH, s.KVH); }

bool every_token_alone(const Case& s) {
  for (const auto& row : s.layout.starts)
    if (int64_t(row.size()) != s.T) return false;
  return true;
}

double max_abs(const Tensor& x) {
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::abs(x.get_flat(i)));
  return m;
}

struct Result {
  Tensor out, lse, grad;  // grad: the fused [B, T, H + 2 KVH, D] dq|dk|dv
};

// The op on `buf`'s device in its dtype, the backward from the given out and lse.
Result run(const Tensor& buf, const Tensor& dout, const Tensor& out_in, const Tensor& lse_in, const Tensor& doc_start,
           const Case& s) {
  const DType t = buf.dtype();
  const Device dev = buf.device();
  Result r{Tensor::empty({s.B, s.T, s.H, s.D}, t, dev), Tensor::empty({s.B, s.H, s.T}, stat_dtype(t), dev),
           Tensor::empty(buf.sizes(), t, dev)};
  attention_forward(q_of(buf, s), k_of(buf, s), v_of(buf, s), r.out, r.lse, doc_start);
  const Tensor& out = out_in.defined() ? out_in : r.out;
  const Tensor& lse = lse_in.defined() ? lse_in : r.lse;
  attention_backward(dout, q_of(buf, s), k_of(buf, s), v_of(buf, s), out, lse, q_of(r.grad, s), k_of(r.grad, s),
                     v_of(r.grad, s), doc_start);
  return r;
}

TEST_F(CudaOps, AttentionWithDocumentsMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& s) {
    if (s.sixteen_bit_only && (c.t == DType::F32 || c.t == DType::F64)) return;
    const DType t = c.t;
    const uint64_t seed = uint64_t(s.T * 101 + s.D);
    const Tensor buf = fused(s, t, seed);
    const Tensor dout = random_tensor({s.B, s.T, s.H, s.D}, DType::F64, seed + 1, -2, 2).to(t);
    const Tensor docs = s.layout.doc_start();
    // The reference: the CPU op in the reference dtype; both backwards get its out (rounded
    // to t) and lse, as in test_cuda_attention.cpp.
    const Result want = run(buf.to(c.rt), dout.to(c.rt), Tensor(), Tensor(), docs, s);
    const Tensor out_t = want.out.to(t);
    const Result want_bwd = run(buf.to(c.rt), dout.to(c.rt), out_t.to(c.rt), want.lse, docs, s);
    const Result got = run(on_gpu(buf), on_gpu(dout), on_gpu(out_t), on_gpu(want.lse), on_gpu(docs), s);
    const double tol = tolerance(t, s.D);
    EXPECT_LE(nmse(on_cpu(got.out), rounded_to(want.out, t)), tol) << "out";
    EXPECT_LE(nmse(on_cpu(got.lse), want.lse), kLseTolerance(t)) << "lse";
    const Tensor g = on_cpu(got.grad), w = rounded_to(want_bwd.grad, t);
    if (every_token_alone(s)) {
      // One key per query: the exact dq and dk are 0 (dP - delta = dO.v - dO.v), both sides
      // hold rounding noise only (test_cuda_attention.cpp's T = 1 case).
      EXPECT_LE(max_abs(q_of(g, s).to(t)), 1e-4) << "dq";
      EXPECT_LE(max_abs(k_of(g, s).to(t)), 1e-4) << "dk";
    } else {
      EXPECT_LE(nmse(q_of(g, s).to(t), q_of(w, s).to(t)), tol) << "dq";
      EXPECT_LE(nmse(k_of(g, s).to(t), k_of(w, s).to(t)), tol) << "dk";
    }
    EXPECT_LE(nmse(v_of(g, s).to(t), v_of(w, s).to(t)), tol) << "dv";
  });
}

// A leading 64-token document of NaN (every q, k, v) on the FMA kernels (float32) and the
// tensor-core kernels (bfloat16, D = 64), 64-row tiles: the later document's outputs and
// gradients are what they are with finite values there, so no kernel read a key tile
// (forward, dQ) or query tile (dK, dV) of it.
TEST_F(CudaOps, AttentionSkipsTilesOfEarlierDocuments) {
  for (const auto& [t, D] : {std::pair{DType::F32, int64_t(16)}, std::pair{DType::BF16, int64_t(64)}}) {
    const Case s{1, 80, 2, 1, D, DocumentLayout{80, {{0, 64}}}};
    const Tensor buf = fused(s, t, 5);
    const Tensor dout = on_gpu(random_tensor({s.B, s.T, s.H, s.D}, DType::F64, 6, -2, 2).to(t));
    const Tensor docs = on_gpu(s.layout.doc_start());
    Tensor poisoned = buf.clone();
    poisoned.narrow(1, 0, 64).fill_(std::numeric_limits<double>::quiet_NaN());
    const Result clean = run(on_gpu(buf), dout, Tensor(), Tensor(), docs, s);
    const Result dirty = run(on_gpu(poisoned), dout, Tensor(), Tensor(), docs, s);
    EXPECT_TRUE(identical(on_cpu(dirty.out).narrow(1, 64, 16), on_cpu(clean.out).narrow(1, 64, 16))) << dtype_name(t);
    EXPECT_TRUE(identical(on_cpu(dirty.grad).narrow(1, 64, 16), on_cpu(clean.grad).narrow(1, 64, 16)))
        << dtype_name(t);
  }
}

}  // namespace
}  // namespace fsdp::test
