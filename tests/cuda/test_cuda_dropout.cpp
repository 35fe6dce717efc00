// CUDA dropout against the CPU: the mask is the same 64-bit integer hash on both sides and
// the kept values are one product rounded on its own (no FMA with the accumulating add), so
// float32 and float64 are identical bits, and bfloat16/float16 are the CPU's float32 result
// rounded once (backward with accumulate too: the float sum of the upcast dx and the
// product, rounded once). Cases: odd shapes,
// row-strided inputs (a column slice of a wider buffer), in place, p in {0, 0.1, 0.5}, and
// a column offset (col0: a tensor-parallel rank's slice of the features) on some.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/dropout.h"

namespace fsdp::test {
namespace {

constexpr uint64_t kKey = 0xd20u;

struct Case {
  int64_t n, c;
  double p;
  std::string name() const { return "n=" + std::to_string(n) + " c=" + std::to_string(c) + " p=" + std::to_string(p); }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t n : {1, 7, 33})
    for (int64_t c : {1, 31, 257})
      for (double p : {0.0, 0.1, 0.5}) out.push_back({n, c, p});
  return out;
}

TEST_F(CudaOps, DropoutMatchesCpuBitForBit) {
  for_each_backend_case(cases(), [](const BackendCase& c, const Case& k) {
    const int64_t n = k.n, cols = k.c;
    const uint64_t seed = uint64_t(n * 1000 + cols);
    const int64_t col0 = n == 7 ? 19 : 0;
    // x is the column slice [3, 3 + cols) of a wider buffer: rows are strided.
    const Tensor wide = random_tensor({n, cols + 5}, DType::F64, seed).to(c.t);
    const Tensor x = wide.narrow(1, 3, cols);
    const Tensor dx0 = random_tensor({n, cols}, DType::F64, seed + 1).to(c.t);
    // CPU reference in float32 / float64 on the exact upcast inputs.
    Tensor ref = Tensor::empty({n, cols}, c.rt);
    dropout_forward(x.to(c.rt), ref, k.p, kKey, 40, col0);
    Tensor ref_acc = dx0.to(c.rt);
    dropout_backward(x.to(c.rt), ref_acc, k.p, kKey, 40, /*accumulate=*/true, col0);
    // CUDA.
    const Tensor gx = on_gpu(wide).narrow(1, 3, cols);
    Tensor got = Tensor::empty({n, cols}, c.t, kGpu);
    dropout_forward(gx, got, k.p, kKey, 40, col0);
    EXPECT_TRUE(identical(on_cpu(got), rounded_to(ref, c.t)));
    Tensor got_acc = on_gpu(dx0);
    dropout_backward(gx, got_acc, k.p, kKey, 40, /*accumulate=*/true, col0);
    // 16-bit: the kernel adds the float product to the upcast dx in float and rounds the
    // sum once, which is the float32 reference rounded once.
    EXPECT_TRUE(identical(on_cpu(got_acc), rounded_to(ref_acc, c.t)));
    // In place (out aliases x).
    Tensor inplace = on_gpu(x.clone());
    dropout_forward(inplace, inplace, k.p, kKey, 40, col0);
    EXPECT_TRUE(identical(on_cpu(inplace), on_cpu(got)));
  });
}

}  // namespace
}  // namespace fsdp::test
