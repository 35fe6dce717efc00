// Tensor's whole-tensor operations on a CUDA device (Note [Tensor copies across devices]
// in src/core/tensor.cpp): zeros, fill_, copy_ (host<->device, device<->device, strided
// on either side, with dtype conversions), clone and to. The reference is the same
// operation on host tensors, and every comparison is bitwise: a copy moves bytes, a fill
// stores the one value the dtype holds, and a conversion rounds one exact value once on
// both sides (the cast kernel is held to the CPU's bits in test_cuda_elementwise.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda_test_util.h"

namespace fsdp::test {
namespace {

const DType kAllTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U16};

// Seeded values every dtype holds exactly: small integers for the integer dtypes.
Tensor values(const Dims& sizes, DType t, uint64_t seed) {
  const Tensor r = random_tensor(sizes, DType::F64, seed, 0, 60000);
  Tensor out = Tensor::empty(sizes, t);
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double v = r.get_flat(i);
    out.set_flat(i, is_floating(t) ? v / 15000.0 - 2.0 : std::floor(t == DType::U16 ? v : v / 2.0 - 15000.0));
  }
  return out;
}

TEST_F(CudaOps, TensorZerosAndFillMatchTheHostBitwise) {
  for (DType t : kAllTypes) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(33), int64_t(4099)}) {
      EXPECT_TRUE(identical(Tensor::zeros({n}, t, kGpu).to(Device::cpu()), Tensor::zeros({n}, t))) << dtype_name(t);
      for (double v : {1.0, -3.0, 0.1, 65504.0}) {
        if (!is_floating(t) && (v != std::floor(v) || (t == DType::U16 && v < 0))) continue;
        Tensor d = Tensor::empty({n}, t, kGpu);
        d.fill_(v);
        Tensor h = Tensor::empty({n}, t);
        h.fill_(v);
        EXPECT_TRUE(identical(d.to(Device::cpu()), h)) << dtype_name(t) << " n=" << n << " v=" << v;
      }
    }
  }
}

TEST_F(CudaOps, TensorRoundTripsAreBitExact) {
  for (DType t : kAllTypes) {
    const Tensor x = values({7, 31}, t, 1);
    const Tensor d = x.to(kGpu);
    EXPECT_EQ(d.device(), kGpu);
    EXPECT_TRUE(d.is_contiguous());
    EXPECT_TRUE(identical(d.to(Device::cpu()), x)) << dtype_name(t);
    EXPECT_TRUE(identical(d.clone().to(Device::cpu()), x)) << dtype_name(t);  // device -> device
    Tensor back = Tensor::zeros({7, 31}, t);
    back.copy_(d);
    EXPECT_TRUE(identical(back, x)) << dtype_name(t);
    Tensor d2 = Tensor::zeros({7, 31}, t, kGpu);
    d2.copy_(x);
    d2.copy_(d2.clone());
    d2.copy_(d2);  // onto itself: nothing to move (a memcpy onto itself is undefined)
    EXPECT_TRUE(identical(d2.to(Device::cpu()), x)) << dtype_name(t);
  }
  // NaN payloads and signed zeros travel unchanged.
  Tensor special = Tensor::empty({4}, DType::F32);
  special.at<float>({0}) = std::numeric_limits<float>::quiet_NaN();
  special.at<float>({1}) = -0.0f;
  special.at<float>({2}) = std::numeric_limits<float>::infinity();
  special.at<float>({3}) = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(identical(special.to(kGpu).to(Device::cpu()), special));
  EXPECT_TRUE(identical(Tensor::empty({0, 5}, DType::F32, kGpu).to(Device::cpu()), Tensor::empty({0, 5}, DType::F32)));
}

// A strided destination or source on either side: the same copy done on host tensors is
// the reference, compared over the whole backing tensor (so nothing outside the view moves).
TEST_F(CudaOps, TensorStridedCopiesMatchTheHost) {
  for (DType t : {DType::F32, DType::BF16, DType::I64}) {
    const Tensor base = values({6, 9, 11}, t, 2);
    const Tensor src = values({6, 9, 11}, t, 3);
    // Views: a column block (row-strided), a transposed matrix, a stepped slice, a
    // narrowed middle dimension, and a plain contiguous block for contrast.
    using View = Tensor (*)(const Tensor&);
    const View views[] = {
        [](const Tensor& x) { return x.narrow(2, 3, 5); },
        [](const Tensor& x) { return x.select(0, 2).transpose(0, 1); },
        [](const Tensor& x) { return x.slice(1, 1, 9, 3); },
        [](const Tensor& x) { return x.narrow(1, 2, 4).narrow(2, 0, 11); },
        [](const Tensor& x) { return x.narrow(0, 1, 2); },
    };
    int k = 0;
    for (View v : views) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " view " << k++);
      // host -> strided device
      {
        const Tensor want = base.clone();
        v(want).copy_(v(src));
        const Tensor d = base.to(kGpu);
        v(d).copy_(v(src));
        EXPECT_TRUE(identical(d.to(Device::cpu()), want));
        // strided device -> host, into a contiguous and into a strided host tensor
        EXPECT_TRUE(identical(v(d).to(Device::cpu()), v(want).clone()));
        const Tensor h = base.clone();
        v(h).copy_(v(d));
        const Tensor want_h = base.clone();
        v(want_h).copy_(v(want));
        EXPECT_TRUE(identical(h, want_h));
      }
      // strided device -> strided device (a transposed source into a plain view too)
      {
        const Tensor want = base.clone();
        v(want).copy_(v(src));
        const Tensor d = base.to(kGpu);
        v(d).copy_(v(src.to(kGpu)));
        EXPECT_TRUE(identical(d.to(Device::cpu()), want));
      }
      // fill_ of a strided device view
      {
        const Tensor want = base.clone();
        v(want).fill_(5.0);
        const Tensor d = base.to(kGpu);
        v(d).fill_(5.0);
        EXPECT_TRUE(identical(d.to(Device::cpu()), want));
        EXPECT_TRUE(identical(v(d).clone().to(Device::cpu()), v(want).clone()));
      }
    }
  }
  // A transposed device matrix made contiguous on the device.
  const Tensor m = values({5, 9}, DType::F32, 4);
  EXPECT_TRUE(identical(m.to(kGpu).transpose(0, 1).clone().to(Device::cpu()), m.transpose(0, 1).clone()));
}

TEST_F(CudaOps, TensorConversionsMatchTheHostBitwise) {
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      if (from == to) continue;
      if (to == DType::U16) continue;  // the other dtypes' values are negative
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to));
      const Tensor x = values({3, 17}, from, 5);
      const Tensor want = x.to(to);
      EXPECT_TRUE(identical(x.to(kGpu, to).to(Device::cpu()), want));       // on the way up
      EXPECT_TRUE(identical(x.to(kGpu).to(Device::cpu(), to), want));       // on the way down
      EXPECT_TRUE(identical(x.to(kGpu).to(to).to(Device::cpu()), want));    // on the device
      const Tensor strided = Tensor::zeros({3, 40}, to, kGpu);              // into a strided view
      strided.narrow(1, 20, 17).copy_(x.to(kGpu).transpose(0, 1).transpose(0, 1));
      EXPECT_TRUE(identical(strided.narrow(1, 20, 17).to(Device::cpu()), want));
      EXPECT_TRUE(identical(strided.narrow(1, 0, 20).to(Device::cpu()), Tensor::zeros({3, 20}, to)));
    }
  }
}

TEST_F(CudaOps, TensorCopiesAcrossDevices) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device";
  const Device other = Device::cuda(1);
  const Tensor x = values({4, 13}, DType::F32, 6);
  const Tensor d1 = x.to(other);
  EXPECT_EQ(d1.device(), other);
  EXPECT_TRUE(identical(d1.to(kGpu).to(Device::cpu()), x));
  const Tensor d0 = Tensor::zeros({4, 26}, DType::BF16, kGpu);
  d0.narrow(1, 13, 13).copy_(d1);  // peer, strided, converted
  EXPECT_TRUE(identical(d0.narrow(1, 13, 13).to(Device::cpu()), x.to(DType::BF16)));
}

TEST_F(CudaOps, TensorDeviceMisuseIsAClearError) {
  const Tensor d = Tensor::zeros({4, 3}, DType::F32, kGpu);
  EXPECT_ERROR_MENTIONS(d.get_flat(0), "only CPU tensors");
  EXPECT_ERROR_MENTIONS(d.at<float>({0, 0}), "only CPU tensors");
  EXPECT_ERROR_MENTIONS(d.copy_(Tensor::zeros({3, 4}, DType::F32)), "shapes differ");
  EXPECT_ERROR_MENTIONS(Tensor::zeros({3}, DType::F32).copy_(Tensor::zeros({4}, DType::F32, kGpu)), "shapes differ");
  EXPECT_ERROR_MENTIONS(d.copy_(Tensor()), "source is an undefined tensor");
  EXPECT_ERROR_MENTIONS(Tensor::zeros({2}, DType::I32, kGpu).fill_(std::nan("")), "cannot fill integer tensor");
  EXPECT_ERROR_MENTIONS(Tensor::empty({2}, DType::F32, Device::cuda(63)), "cuda:63");
}

}  // namespace
}  // namespace fsdp::test
