// The whole-tensor CUDA ops (fill, add, scale, cast, sum_squares), AdamW, copies and the
// allocator, against the CPU, the reference (ggml's test-backend-ops pattern): cases
// with their inputs (seeded random, awkward sizes: odd, prime, not
// multiples of 32 or 4, plus 1), its dtype and the error it is allowed, measured as the
// normalised mean squared error sum((cuda - cpu)^2) / sum(cpu^2). The shipped kernels
// run: in the emulation build on the SIMT emulator, on a GPU for real (unchanged).
//
// Tolerances, and why:
//   bitwise    fill, cast, add, scale: one rounding of the same exact value on both sides.
//   1e-24      sum_squares (relative error 1e-12): both accumulate in double, in different
//              orders.
//   1e-12      AdamW float32 (1e-26 float64): nvcc contracts a*b+c into FMA, which moves
//              the last bit of some elements; the emulation build matches bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_case.h"
#include "fsdp/ops/adamw.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp::test {
namespace {

// ---- memory and copies --------------------------------------------------------------------
TEST_F(CudaOps, CopiesRoundTripEveryDtype) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U16})
    for (int64_t n : kSizes) {
      const Tensor x = input(n, t, uint64_t(n));
      EXPECT_TRUE(identical(on_cpu(on_gpu(x)), x)) << dtype_name(t) << " n=" << n;
    }
  // A strided host view is packed on the way.
  const Tensor m = random_tensor({5, 9}, DType::F32, 3);
  EXPECT_TRUE(identical(on_cpu(on_gpu(m.transpose(0, 1))), m.transpose(0, 1).clone()));
  if (cuda::device_count() > 1) {
    const Tensor x = input(1000, DType::F32, 4);
    EXPECT_TRUE(identical(on_cpu(cuda::to_device(on_gpu(x), Device::cuda(1))), x));
  }
}

TEST_F(CudaOps, AllocatorAccountsAndReportsOutOfMemory) {
  Allocator& a = allocator_for(kGpu);
  const size_t before = a.stats().current_bytes;
  {
    Tensor t = Tensor::empty({1000}, DType::F32, kGpu);
    EXPECT_EQ(a.stats().current_bytes, before + 4000);
    EXPECT_EQ(t.device(), kGpu);
  }
  EXPECT_EQ(a.stats().current_bytes, before);
  expect_error([] { Tensor::empty({int64_t(1) << 38}, DType::F32, kGpu); },
               {"cuda:0 out of memory allocating 1099511627776 bytes", "memory pool"});
}

// ---- fill, add, scale, cast ----------------------------------------------------------------
TEST_F(CudaOps, FillMatchesCpuBitwise) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U16})
    for (int64_t n : kSizes)
      for (double v : {0.0, 1.5, -3.0, 1e-3}) {
        if (!is_floating(t) && v != std::floor(v)) continue;
        Tensor want = Tensor::empty({n}, t), got = Tensor::empty({n}, t, kGpu);
        fill_(want, v);
        fill_(got, v);
        EXPECT_TRUE(identical(on_cpu(got), want)) << dtype_name(t) << " n=" << n << " v=" << v;
      }
}

// add and scale on the CPU exist for float32/float64; for the 16-bit types the reference
// is the float32 op on the (exact) upcast inputs, rounded once (backend_case.h).
TEST_F(CudaOps, AddMatchesCpuBitwise) {
  for_each_backend_case(kSizes, [](const BackendCase& c, int64_t n) {
    const Tensor a = input(n, c.t, 10 + uint64_t(n)), b = input(n, c.t, 20 + uint64_t(n));
    Tensor want = Tensor::empty({n}, c.rt);
    add(a.to(c.rt), b.to(c.rt), want);
    const Tensor ga = on_gpu(a), gb = on_gpu(b);
    Tensor got = Tensor::empty({n}, c.t, kGpu);
    add(ga, gb, got);
    EXPECT_TRUE(identical(on_cpu(got), rounded_to(want, c.t)));
    add(ga, gb, ga);  // out aliasing an input
    EXPECT_TRUE(identical(on_cpu(ga), rounded_to(want, c.t)));
  });
}

TEST_F(CudaOps, ScaleMatchesCpuBitwise) {
  for_each_backend_case(kSizes, [](const BackendCase& c, int64_t n) {
    const Tensor x = input(n, c.t, 30 + uint64_t(n));
    Tensor want = x.to(c.rt);
    scale_(want, -0.3);
    Tensor got = on_gpu(x);
    scale_(got, -0.3);
    EXPECT_TRUE(identical(on_cpu(got), rounded_to(want, c.t)));
  });
}

TEST_F(CudaOps, CastMatchesCpuBitwiseIncludingSpecialValues) {
  const double specials[] = {0.0,   -0.0,    1.0,     65504.0, 65520.0, 1e-8,  6e-5,
                             3e38,  1e300,   -1e-300, 1.00390625, 1.01171875, 1 + 1.0 / 512 + 1e-12,
                             std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes)
      for (int64_t n : {int64_t(16), int64_t(1000), int64_t(4099)}) {
        Tensor src64 = random_tensor({n}, DType::F64, 40 + uint64_t(n), -3e5, 3e5);
        for (int64_t i = 0; i < 16; ++i) src64.set_flat(i, specials[i]);
        Tensor src = Tensor::empty({n}, from);
        cast(src64, src);
        Tensor want = Tensor::empty({n}, to);
        cast(src, want);
        Tensor got = Tensor::empty({n}, to, kGpu);
        cast(on_gpu(src), got);
        EXPECT_TRUE(identical(on_cpu(got), want)) << dtype_name(from) << " -> " << dtype_name(to) << " n=" << n;
      }
}

// ---- sum_squares ---------------------------------------------------------------------------
TEST_F(CudaOps, SumSquaresMatchesCpuAndIsDeterministic) {
  const int64_t sizes[] = {1, 33, 1000, 4099, 100003};
  for_each_backend_case(sizes, [](const BackendCase& c, int64_t n) {
    const Tensor x = input(n, c.t, 50 + uint64_t(n));
    const double want = sum_squares(rounded_to(x, c.rt));  // exact upcast for 16-bit
    const Tensor g = on_gpu(x);
    const double got = sum_squares(g);
    EXPECT_LE(std::fabs(got - want), 1e-12 * want);
    const double again = sum_squares(g);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0) << "two runs differ: " << got << " " << again;
  });
}

// ---- AdamW ---------------------------------------------------------------------------------
TEST_F(CudaOps, AdamWMatchesCpuOverSeveralSteps) {
  for (DType t : {DType::F32, DType::F64})
    for (int64_t n : kSizes) {
      Tensor p = input(n, t, 60 + uint64_t(n)), m = Tensor::zeros({n}, t), v = Tensor::zeros({n}, t);
      Tensor gp = on_gpu(p), gm = on_gpu(m), gv = on_gpu(v);
      AdamWHyper h;
      h.lr = 1e-2;
      h.weight_decay = 0.1;
      for (int64_t step = 1; step <= 4; ++step) {
        h.step = step;
        const Tensor grad = input(n, t, 70 + uint64_t(n * 10 + step));
        const double scale = step == 3 ? 0.25 : 1.0;  // clipping's grad scale
        adamw_update(p, grad, m, v, h, scale);
        adamw_update(gp, on_gpu(grad), gm, gv, h, scale);
      }
      const double tol = t == DType::F32 ? 1e-12 : 1e-26;
      EXPECT_LE(nmse(on_cpu(gp), p), tol) << dtype_name(t) << " n=" << n;
      EXPECT_LE(nmse(on_cpu(gm), m), tol) << dtype_name(t) << " n=" << n;
      EXPECT_LE(nmse(on_cpu(gv), v), tol) << dtype_name(t) << " n=" << n;
    }
}

// ---- 16-byte accesses (Note [Packed accesses] in src/ops/cuda/common.cuh) -----------------------
// Views starting at every element offset within 16 bytes: the aligned ones take the packed
// loop (plus the tail), the others the element loop; both must give the CPU's bits (AdamW:
// within its FMA tolerance above), and the emulator fails any launch that would make a
// misaligned vector access, as a GPU would.
TEST_F(CudaOps, PackedAndElementPathsAgreeWithCpuAtEveryOffset) {
  const int64_t n = 1003;
  for (DType t : kFloatTypes) {
    const int64_t per16 = int64_t(16 / dtype_size(t));
    for (int64_t off = 0; off <= per16; ++off) {
      const int64_t len = n - off - 3;
      SCOPED_TRACE(std::string(dtype_name(t)) + " offset " + std::to_string(off));
      const DType ref_t = reference_dtype(t);
      const Tensor a = input(n, t, 80 + uint64_t(off)), b = input(n, t, 90 + uint64_t(off));
      const Tensor av = a.narrow(0, off, len), bv = b.narrow(0, off, len);
      Tensor sum = Tensor::empty({len}, ref_t);
      add(av.to(ref_t), bv.to(ref_t), sum);
      Tensor want = rounded_to(sum, t).to(ref_t);  // the device rounds to t after each op
      scale_(want, 0.7);
      const Tensor ga = on_gpu(a), gb = on_gpu(b);
      Tensor gout = Tensor::zeros({n}, t, kGpu);
      const Tensor outv = gout.narrow(0, off, len);
      add(ga.narrow(0, off, len), gb.narrow(0, off, len), outv);
      scale_(outv, 0.7);
      EXPECT_TRUE(identical(on_cpu(outv.clone()), rounded_to(want, t)));
      // cast into a view of another offset parity (bf16 <-> f32 mixes pack widths)
      for (DType to : {DType::F32, DType::BF16}) {
        Tensor cwant = Tensor::empty({len}, to);
        cast(av, cwant);
        Tensor gdst = Tensor::zeros({n}, to, kGpu);
        cast(ga.narrow(0, off, len), gdst.narrow(0, off, len));
        EXPECT_TRUE(identical(on_cpu(gdst.narrow(0, off, len).clone()), cwant)) << "cast to " << dtype_name(to);
      }
      Tensor fwant = Tensor::empty({len}, t);
      fill_(fwant, -2.5);
      fill_(outv, -2.5);
      EXPECT_TRUE(identical(on_cpu(outv.clone()), fwant));
      EXPECT_EQ(on_cpu(gout).get_flat(off == 0 ? n - 1 : off - 1), 0.0) << "fill wrote outside its view";
    }
  }
  for (DType t : {DType::F32, DType::F64}) {
    for (int64_t off = 0; off <= int64_t(16 / dtype_size(t)); ++off) {
      const int64_t len = n - off - 1;
      Tensor p = input(n, t, 100 + uint64_t(off)), m = Tensor::zeros({n}, t), v = Tensor::zeros({n}, t);
      const Tensor grad = input(n, t, 110 + uint64_t(off));
      Tensor gp = on_gpu(p), gm = on_gpu(m), gv = on_gpu(v);
      AdamWHyper h;
      h.lr = 1e-2;
      h.weight_decay = 0.1;
      adamw_update(p.narrow(0, off, len), grad.narrow(0, off, len), m.narrow(0, off, len), v.narrow(0, off, len), h);
      adamw_update(gp.narrow(0, off, len), on_gpu(grad).narrow(0, off, len), gm.narrow(0, off, len),
                   gv.narrow(0, off, len), h);
      EXPECT_LE(nmse(on_cpu(gp), p), t == DType::F32 ? 1e-12 : 1e-26) << dtype_name(t) << " offset " << off;
    }
  }
}

// ---- front-end checks reach the CUDA ops too ----------------------------------------------------
TEST_F(CudaOps, MixedDevicesAreRefused) {
  const Tensor a = Tensor::zeros({4}, DType::F32);
  const Tensor b = on_gpu(a);
  Tensor out = Tensor::empty({4}, DType::F32, kGpu);
  expect_error([&] { add(a, b, out); }, {"same device"});
}

}  // namespace
}  // namespace fsdp::test
