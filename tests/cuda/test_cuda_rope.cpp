// CUDA RoPE against the CPU, forward and backward (the inverse rotation), on strided
// [B, T, H, D] views of a wider buffer, with position offsets, in place and not, and with
// documents (positions restarting at each, Note [Document masking] in fsdp/ops/attention.h).
// Tolerances (normalised MSE): float64 1e-26 and float32 1e-12 (identical formulas; nvcc
// may contract into FMA), bfloat16 1e-5 (reference: float32 on the upcast inputs, rounded;
// an FMA-moved float can flip a bf16 rounding), float16 1e-7 (the same reference; a flip
// costs 2^-11 relative instead of 2^-8, so every element flipping would be 2.4e-7;
// measured 0 in the emulator).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/document_layouts.h"
#include "backend_case.h"
#include "fsdp/ops/rope.h"

namespace fsdp::test {
namespace {

constexpr Tolerance kTolerance{.f64 = 1e-26, .f32 = 1e-12, .bf16 = 1e-5, .f16 = 1e-7};

struct Shape {
  int64_t B, T, H, D;
};
const Shape kShapes[] = {{1, 1, 1, 2}, {2, 5, 3, 6}, {1, 33, 4, 10}, {3, 7, 2, 34}};

struct Case {
  Shape s;
  int64_t offset;
  bool inverse, in_place;
  bool documents = false;
  std::string name() const {
    return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " H" + std::to_string(s.H) + " D" +
           std::to_string(s.D) + " offset " + std::to_string(offset) + (inverse ? " inverse" : "") +
           (in_place ? " in place" : "") + (documents ? " documents" : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Shape& s : kShapes)
    for (int64_t offset : {0, 3})
      for (bool inverse : {false, true})
        for (bool in_place : {false, true}) out.push_back({s, offset, inverse, in_place, offset == 3 && s.T > 1});
  return out;
}

// [B, T, H, D] heads 1..H of a [B, T, H + 2, D] buffer: dims 0-1 strided, (H, D) packed.
Tensor heads_view(const Tensor& buf, int64_t h) { return buf.narrow(2, 1, h); }

TEST_F(CudaOps, RopeMatchesCpu) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const Shape& s = k.s;
    const RopeTables cpu_tables = make_rope_tables(s.T + k.offset, s.D, 1e4);
    const RopeTables gpu_tables{on_gpu(cpu_tables.cos), on_gpu(cpu_tables.sin)};
    const Tensor buf = random_tensor({s.B, s.T, s.H + 2, s.D}, DType::F64, uint64_t(s.D * 31 + s.T), -2, 2).to(c.t);
    // Reference: the CPU op on the (exact) reference-dtype copy.
    const Tensor x = heads_view(buf.to(c.rt), s.H);
    Tensor y = Tensor::empty({s.B, s.T, s.H, s.D}, c.rt);
    const Tensor docs = k.documents ? random_layout(s.B, s.T, 0.3, uint64_t(s.T)).doc_start() : Tensor();
    (k.inverse ? rope_backward : rope_forward)(x, y, cpu_tables, k.offset, docs);

    const Tensor gbuf = on_gpu(buf);
    const Tensor gx = heads_view(gbuf, s.H);
    const Tensor gy = k.in_place ? gx : Tensor::empty({s.B, s.T, s.H, s.D}, c.t, kGpu);
    (k.inverse ? rope_backward : rope_forward)(gx, gy, gpu_tables, k.offset, k.documents ? on_gpu(docs) : Tensor());
    const Tensor got = k.in_place ? heads_view(on_cpu(gbuf), s.H) : on_cpu(gy);
    EXPECT_LE(nmse(got, rounded_to(y, c.t)), kTolerance(c.t));
  });
}

}  // namespace
}  // namespace fsdp::test
