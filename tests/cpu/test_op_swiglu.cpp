// SwiGLU forward/backward on the CPU backend: a naive float64 reference, central finite
// differences for gate and up, the fused [N, 2F] buffer split by views (and overwritten in
// place by backward), and errors that name the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "fsdp/ops/swiglu.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

TEST(OpSwiglu, ForwardMatchesReference) {
  for (auto [n, f] : {std::pair<int64_t, int64_t>{1, 7}, {4, 13}, {64, 300}}) {
    for (DType dt : {DType::F64, DType::F32}) {
      // Wide gate range: exercises both tails of the sigmoid.
      const Tensor gate = random_tensor({n, f}, dt, 1, -12.0, 12.0), up = random_tensor({n, f}, dt, 2);
      const Tensor out = Tensor::empty({n, f}, dt);
      swiglu_forward(gate, up, out);
      Tensor ref = Tensor::empty({n, f}, DType::F64);
      for (int64_t i = 0; i < n * f; ++i) {
        const double g = gate.get_flat(i);
        ref.set_flat(i, g / (1.0 + std::exp(-g)) * up.get_flat(i));
      }
      // float64: a few roundings (~1e-16). float32: expf is within 1 ulp and there are
      // four more roundings: a few units of 2^-24 ~ 6e-8 per element.
      EXPECT_LT(rel_error(out, ref), dt == DType::F64 ? 1e-14 : 3e-7) << n << "x" << f << " " << dtype_name(dt);
    }
  }
}

TEST(OpSwiglu, BackwardMatchesFiniteDifferences) {
  // Central differences, h = 1e-6, float64: truncation ~1e-12, rounding ~1e-10 relative,
  // so a correct gradient lands near 1e-9; 1e-6 separates that from any wrong term.
  for (auto [n, f] : {std::pair<int64_t, int64_t>{1, 7}, {4, 13}, {3, 40}}) {
    const Tensor gate = random_tensor({n, f}, DType::F64, 3, -4.0, 4.0), up = random_tensor({n, f}, DType::F64, 4);
    const Tensor wts = random_tensor({n, f}, DType::F64, 5);
    const Tensor out = Tensor::empty({n, f}, DType::F64);
    const Tensor dgate = Tensor::empty({n, f}, DType::F64), dup = Tensor::empty({n, f}, DType::F64);
    swiglu_backward(wts, gate, up, dgate, dup);
    auto loss = [&] {
      swiglu_forward(gate, up, out);
      return weighted_sum(out, wts);
    };
    EXPECT_LT(fd_rel_error(loss, gate, dgate), 1e-6) << "dgate " << n << "x" << f;
    EXPECT_LT(fd_rel_error(loss, up, dup), 1e-6) << "dup " << n << "x" << f;
  }
}

TEST(OpSwiglu, FusedBufferViewsAndInPlaceBackward) {
  // gate | up are the two halves of one [N, 2F] GEMM output; backward may write dgate and
  // dup straight over them. Both must give exactly the separate-buffer results.
  const int64_t n = 5, f = 13;
  const Tensor fused = random_tensor({n, 2 * f}, DType::F32, 6, -5.0, 5.0);
  const Tensor gate = fused.narrow(1, 0, f), up = fused.narrow(1, f, f);
  const Tensor dout = random_tensor({n, f}, DType::F32, 7);
  const Tensor gate_c = gate.clone(), up_c = up.clone();
  const Tensor out = Tensor::empty({n, f}, DType::F32), out_c = Tensor::empty({n, f}, DType::F32);
  swiglu_forward(gate, up, out);
  swiglu_forward(gate_c, up_c, out_c);
  const Tensor dgate_c = Tensor::empty({n, f}, DType::F32), dup_c = Tensor::empty({n, f}, DType::F32);
  swiglu_backward(dout, gate_c, up_c, dgate_c, dup_c);
  swiglu_backward(dout, gate, up, gate, up);  // in place over the fused buffer
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      ASSERT_EQ(out.get({i, j}), out_c.get({i, j}));
      ASSERT_EQ(gate.get({i, j}), dgate_c.get({i, j}));
      ASSERT_EQ(up.get({i, j}), dup_c.get({i, j}));
    }
}

TEST(OpSwiglu, ExtremeGatesStayFinite) {
  // exp(-g) overflows for very negative g: the limits silu -> 0 and silu -> g must come
  // out, never NaN.
  const Tensor gate = Tensor::empty({1, 4}, DType::F32), up = Tensor::empty({1, 4}, DType::F32);
  const double gs[4] = {-200.0, -90.0, 90.0, 200.0};
  for (int64_t j = 0; j < 4; ++j) {
    gate.set({0, j}, gs[j]);
    up.set({0, j}, 2.0);
  }
  const Tensor out = Tensor::empty({1, 4}, DType::F32);
  const Tensor dgate = Tensor::empty({1, 4}, DType::F32), dup = Tensor::empty({1, 4}, DType::F32);
  swiglu_forward(gate, up, out);
  swiglu_backward(up, gate, up, dgate, dup);
  for (int64_t j = 0; j < 4; ++j) {
    const double expect = gs[j] > 0 ? 2.0 * gs[j] : 0.0;
    EXPECT_EQ(out.get({0, j}), expect) << gs[j];
    EXPECT_TRUE(std::isfinite(dgate.get({0, j}))) << gs[j];
    EXPECT_EQ(dgate.get({0, j}), gs[j] > 0 ? 4.0 : 0.0) << gs[j];
  }
}

TEST(OpSwiglu, BadArgumentsNameTheArgument) {
  const int64_t n = 3, f = 7;
  const Tensor gate = random_tensor({n, f}, DType::F32, 1), up = random_tensor({n, f}, DType::F32, 2);
  const Tensor out = Tensor::empty({n, f}, DType::F32);
  expect_error([&] { swiglu_forward(gate, Tensor::empty({n, f + 1}, DType::F32), out); }, {"up", "[3, 7]"});
  expect_error([&] { swiglu_forward(gate, up, Tensor::empty({n, f}, DType::F64)); }, {"out", "same dtype"});
  expect_error([&] { swiglu_forward(gate.reshape({-1}), up, out); }, {"gate", "2 dimensions"});
  expect_error([&] { swiglu_forward(random_tensor({f, n}, DType::F32, 3).transpose(0, 1), up, out); },
               {"gate", "packed"});
  expect_error([&] { swiglu_forward(Tensor::zeros({n, f}, DType::I32), up, out); }, {"gate", "floating"});
  expect_error([&] { swiglu_backward(out, gate, up, Tensor::empty({n + 1, f}, DType::F32), out); },
               {"dgate", "[3, 7]"});
  expect_error([&] { swiglu_backward(out, gate, up, out, Tensor()); }, {"dup", "undefined"});
  expect_error([&] { swiglu_forward(gate.to(DType::F16), up.to(DType::F16), out.to(DType::F16)); },
               {"float16", "not implemented on the CPU"});
}

}  // namespace
}  // namespace fsdp::test
