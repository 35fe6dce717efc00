// Whole-tensor ops on the CPU backend: add, scale_, fill_, cast and sum_squares. Casts are
// checked on edge cases and on large sweeps of bit patterns against independent
// conversions (the compiler's _Float16, and rounding formulas written out here);
// sum_squares must give the same bits for any thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fsdp/ops/elementwise.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

float bits_to_float(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t float_to_bits(float f) { return std::bit_cast<uint32_t>(f); }
uint16_t half_bits(_Float16 h) { return std::bit_cast<uint16_t>(h); }
bool is_nan16(uint16_t b, int mant_bits) {
  const uint16_t exp_mask = uint16_t(((1u << (15 - mant_bits)) - 1u) << mant_bits);
  return (b & exp_mask) == exp_mask && (b & ((1u << mant_bits) - 1u)) != 0;
}

// bf16 = the top half of the float, rounded to nearest even on the low 16 bits: the
// textbook formula (not the add-a-bias trick dtype.h uses). NaN handled by the caller.
uint16_t reference_bf16(uint32_t u) {
  uint32_t hi = u >> 16;
  const uint32_t lo = u & 0xffffu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) ++hi;  // a carry into the exponent is right
  return uint16_t(hi);
}

// Correctly rounded double -> bf16 from the definition: keep 8 significant bits (fewer
// below 2^-126, where the quantum stays 2^-133) with nearbyint's ties-to-even.
uint16_t reference_bf16_from_double(double d) {
  const double a = std::fabs(d);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int q = std::max(e - 8, -133);
  const double r = std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);
  const uint32_t u = float_to_bits(float(r));  // r is a bf16 value (or overflows to inf)
  return uint16_t((u >> 16) | (std::signbit(d) ? 0x8000u : 0u));
}

// Runs the shipped cast kernel on a float32 tensor of bit patterns.
Tensor cast_bits(const std::vector<uint32_t>& bits, DType to) {
  Tensor src = Tensor::empty({int64_t(bits.size())}, DType::F32);
  std::memcpy(src.data_ptr(), bits.data(), bits.size() * 4);
  Tensor dst = Tensor::empty({int64_t(bits.size())}, to);
  cast(src, dst);
  return dst;
}

TEST(OpElementwise, AddScaleFill) {
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor a = random_tensor({3, 7}, dt, 1), b = random_tensor({3, 7}, dt, 2);
    const Tensor out = Tensor::empty({3, 7}, dt);
    add(a, b, out);
    for (int64_t i = 0; i < 21; ++i) {
      const double expect = dt == DType::F32 ? double(float(a.get_flat(i)) + float(b.get_flat(i)))
                                             : a.get_flat(i) + b.get_flat(i);
      ASSERT_EQ(out.get_flat(i), expect);
    }
    add(a, b, a);  // out may alias an input
    for (int64_t i = 0; i < 21; ++i) ASSERT_EQ(a.get_flat(i), out.get_flat(i));
    scale_(a, -0.5);
    for (int64_t i = 0; i < 21; ++i) ASSERT_EQ(a.get_flat(i), out.get_flat(i) * -0.5);  // exact: power of two
  }
  const Tensor big = Tensor::empty({100003}, DType::F32);  // parallel path
  fill_(big, 2.5);
  for (int64_t i = 0; i < big.numel(); i += 997) ASSERT_EQ(big.get_flat(i), 2.5);
  const Tensor h = Tensor::empty({5}, DType::BF16), hf = Tensor::empty({5}, DType::F16);
  fill_(h, 1.5);
  fill_(hf, -2.0);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(h.data<bf16>()[i].bits, 0x3fc0);
    EXPECT_EQ(hf.data<f16>()[i].bits, 0xc000);
  }
  const Tensor i32 = Tensor::empty({4}, DType::I32), i64 = Tensor::empty({4}, DType::I64);
  fill_(i32, 7);
  fill_(i64, -3);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(i32.data<int32_t>()[i], 7);
    EXPECT_EQ(i64.data<int64_t>()[i], -3);
  }
  fill_(Tensor::empty({0}, DType::F32), 1.0);  // empty: a no-op
}

TEST(OpElementwise, CastBf16EdgeCases) {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "1.0"},
      {0x3f808000u, 0x3f80, "tie 1+2^-8 -> even (down)"},
      {0x3f818000u, 0x3f82, "tie 1+3*2^-8 -> even (up)"},
      {0x3f808001u, 0x3f81, "just above a tie"},
      {0x3f807fffu, 0x3f80, "just below a tie"},
      {0x80000000u, 0x8000, "-0"},
      {0x00008000u, 0x0000, "subnormal tie -> even zero"},
      {0x00018000u, 0x0002, "subnormal tie -> even (up)"},
      {0x00000001u, 0x0000, "smallest subnormal -> 0"},
      {0x807fffffu, 0x8080, "largest negative subnormal rounds to -min normal"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to inf"},
      {0x7f800000u, 0x7f80, "inf"},
      {0xff800000u, 0xff80, "-inf"},
  };
  std::vector<uint32_t> in;
  for (const Case& c : cases) in.push_back(c.in);
  const Tensor out = cast_bits(in, DType::BF16);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out.data<bf16>()[i].bits, cases[i].out) << cases[i].what;
  // NaNs stay NaN, even a payload only in the low 16 bits (truncation would make it inf).
  const Tensor nan = cast_bits({0x7fc00000u, 0x7f800001u, 0xff800100u}, DType::BF16);
  for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(is_nan16(nan.data<bf16>()[i].bits, 7)) << i;
  EXPECT_EQ(nan.data<bf16>()[2].bits & 0x8000, 0x8000);  // sign kept
}

TEST(OpElementwise, CastF16EdgeCases) {
  struct Case {
    float in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {1.0f, 0x3c00, "1.0"},
      {1.0f + 0x1p-11f, 0x3c00, "tie 1+2^-11 -> even (down)"},
      {1.0f + 3 * 0x1p-11f, 0x3c02, "tie 1+3*2^-11 -> even (up)"},
      {65504.0f, 0x7bff, "max half"},
      {65519.0f, 0x7bff, "below the overflow tie"},
      {65520.0f, 0x7c00, "overflow tie rounds to inf"},
      {1e6f, 0x7c00, "overflow"},
      {-1e6f, 0xfc00, "negative overflow"},
      {0x1p-14f, 0x0400, "min normal"},
      {0x1p-24f, 0x0001, "min subnormal"},
      {0x1p-25f, 0x0000, "half the min subnormal: tie to even zero"},
      {0x1.8p-25f, 0x0001, "above that tie"},
      {3 * 0x1p-25f, 0x0002, "subnormal tie 1.5 -> 2"},
      {0x1.ffcp-15f, 0x0400, "largest subnormal tie rounds up into the normals"},
      {0x1p-30f, 0x0000, "underflow"},
      {-0.0f, 0x8000, "-0"},
      {std::numeric_limits<float>::infinity(), 0x7c00, "inf"},
  };
  std::vector<uint32_t> in;
  for (const Case& c : cases) in.push_back(float_to_bits(c.in));
  const Tensor out = cast_bits(in, DType::F16);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out.data<f16>()[i].bits, cases[i].out) << cases[i].what;
  const Tensor nan = cast_bits({0x7fc00000u, 0xff800001u}, DType::F16);
  for (int64_t i = 0; i < 2; ++i) EXPECT_TRUE(is_nan16(nan.data<f16>()[i].bits, 10)) << i;
}

TEST(OpElementwise, CastAllHalfPatternsToFloatAndBack) {
  // Every f16 and bf16 bit pattern -> float32 must be exact, and float32 -> back the
  // identity (NaNs stay NaN).
  const int64_t n = 1 << 16;
  for (DType dt : {DType::F16, DType::BF16}) {
    Tensor h = Tensor::empty({n}, dt);
    uint16_t* hb = static_cast<uint16_t*>(h.data_ptr());
    for (int64_t i = 0; i < n; ++i) hb[i] = uint16_t(i);
    Tensor f = Tensor::empty({n}, DType::F32), back = Tensor::empty({n}, dt);
    cast(h, f);
    cast(f, back);
    const uint16_t* bb = static_cast<const uint16_t*>(back.data_ptr());
    const int mant = dt == DType::F16 ? 10 : 7;
    for (int64_t i = 0; i < n; ++i) {
      const float got = f.data<float>()[i];
      float expect;
      if (dt == DType::F16) {
        _Float16 x;
        std::memcpy(&x, &hb[i], 2);
        expect = float(x);
      } else {
        expect = bits_to_float(uint32_t(i) << 16);
      }
      if (is_nan16(uint16_t(i), mant)) {
        ASSERT_TRUE(std::isnan(got)) << dtype_name(dt) << " " << i;
        ASSERT_TRUE(is_nan16(bb[i], mant)) << dtype_name(dt) << " " << i;
      } else {
        ASSERT_EQ(float_to_bits(got), float_to_bits(expect)) << dtype_name(dt) << " " << i;
        ASSERT_EQ(bb[i], uint16_t(i)) << dtype_name(dt) << " " << i;
      }
    }
  }
}

TEST(OpElementwise, CastFloatSweepMatchesReferences) {
  // float32 -> f16 against the compiler's _Float16 conversion (hardware vcvtss2sh or
  // libgcc's soft-float, both correctly rounded) and float32 -> bf16 against the textbook
  // formula, on (a) every 251st bit pattern of all 2^32 (251 is prime, so every low-bit
  // residue is hit), (b) every f16 halfway point and its two float neighbours (the
  // round-to-even decisions), (c) random floats.
  std::vector<uint32_t> bits;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 251) bits.push_back(uint32_t(u));
  for (uint32_t hb = 0; hb < 0x7c00u; ++hb) {  // positive finite halves; the sign is symmetric
    _Float16 lo, hi;
    const uint16_t next = uint16_t(hb + 1);
    std::memcpy(&lo, &hb, 2);
    std::memcpy(&hi, &next, 2);
    const uint32_t mid = float_to_bits((float(lo) + float(hi)) / 2);  // exact in float
    for (uint32_t m : {mid - 1, mid, mid + 1}) {
      bits.push_back(m);
      bits.push_back(m | 0x80000000u);
    }
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 1000000; ++i) bits.push_back(rng());

  const Tensor h = cast_bits(bits, DType::F16);
  const Tensor b = cast_bits(bits, DType::BF16);
  const uint16_t* hp = static_cast<const uint16_t*>(h.data_ptr());
  const uint16_t* bp = static_cast<const uint16_t*>(b.data_ptr());
  int64_t checked_nan = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const float f = bits_to_float(bits[i]);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(hp[i], 10) && is_nan16(bp[i], 7)) << std::hex << bits[i];
      ++checked_nan;
      continue;
    }
    ASSERT_EQ(hp[i], half_bits(_Float16(f))) << "f16 of 0x" << std::hex << bits[i];
    ASSERT_EQ(bp[i], reference_bf16(bits[i])) << "bf16 of 0x" << std::hex << bits[i];
  }
  EXPECT_GT(checked_nan, 0);
}

TEST(OpElementwise, CastDoubleRoundsOnce) {
  // double -> half must round once. Going through float naively rounds twice and lands
  // one ulp off just above a tie: 1 + 2^-8 + 2^-30 is above the bf16 tie at 1 + 2^-8, but
  // float(d) = 1 + 2^-8 exactly, which then ties down to 1.
  const Tensor d = Tensor::empty({4}, DType::F64);
  d.set({0}, 1.0 + 0x1p-8 + 0x1p-30);    // bf16: up to 1 + 2^-7 (0x3f81)
  d.set({1}, 1.0 + 0x1p-11 + 0x1p-40);   // f16: up to 1 + 2^-10 (0x3c01)
  d.set({2}, 1.0 + 0x1p-8 - 0x1p-40);    // bf16: down to 1 (0x3f80)
  d.set({3}, 1e300);                     // overflow: inf
  const Tensor b = Tensor::empty({4}, DType::BF16), h = Tensor::empty({4}, DType::F16);
  cast(d, b);
  cast(d, h);
  EXPECT_EQ(b.data<bf16>()[0].bits, 0x3f81);
  EXPECT_EQ(h.data<f16>()[1].bits, 0x3c01);
  EXPECT_EQ(b.data<bf16>()[2].bits, 0x3f80);
  EXPECT_EQ(b.data<bf16>()[3].bits, 0x7f80);
  EXPECT_EQ(h.data<f16>()[3].bits, 0x7c00);

  // Random doubles of every magnitude, half of them nudged next to a half / bf16 tie.
  const int64_t n = 400000;
  Tensor src = Tensor::empty({n}, DType::F64);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int64_t i = 0; i < n; ++i) {
    const int e = int(rng() % 300) - 150;
    double v = std::ldexp(mant(rng), e);
    if (i % 2) {  // next to a tie of f16 (10 fraction bits) or bf16 (7), plus or minus a little
      const int bits = (i % 4 == 1) ? 10 : 7;
      const double q = std::ldexp(1.0, e - bits);
      v = (std::floor(v / q) + 0.5) * q + ((rng() & 1) ? 1 : -1) * std::ldexp(q, -(int(rng() % 40) + 1));
    }
    src.set_flat(i, (rng() & 1) ? -v : v);
  }
  const Tensor hb = Tensor::empty({n}, DType::F16), bb = Tensor::empty({n}, DType::BF16);
  cast(src, hb);
  cast(src, bb);
  const double* sp = src.data<double>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hb.data<f16>()[i].bits, half_bits(_Float16(sp[i]))) << "f16 of " << sp[i];
    ASSERT_EQ(bb.data<bf16>()[i].bits, reference_bf16_from_double(sp[i])) << "bf16 of " << sp[i];
  }
}

TEST(OpElementwise, CastBetweenAllFloatTypes) {
  // Values exactly representable in every float type survive every pair of casts.
  const double vals[] = {0.0, -0.0, 1.0, -2.5, 0.15625, 1024.0, -0x1p-10};
  const DType types[] = {DType::F32, DType::F64, DType::BF16, DType::F16};
  for (DType from : types) {
    for (DType to : types) {
      Tensor s = Tensor::empty({7}, from), d = Tensor::empty({7}, to);
      for (int64_t i = 0; i < 7; ++i) s.set_flat(i, vals[i]);
      cast(s, d);
      for (int64_t i = 0; i < 7; ++i) {
        EXPECT_EQ(d.get_flat(i), vals[i]) << dtype_name(from) << " -> " << dtype_name(to);
        EXPECT_EQ(std::signbit(d.get_flat(i)), std::signbit(vals[i]));
      }
    }
  }
  // A value that needs rounding: 1/3 in f64 -> f32 is the nearest float.
  Tensor s = Tensor::empty({1}, DType::F64), d = Tensor::empty({1}, DType::F32);
  s.set_flat(0, 1.0 / 3.0);
  cast(s, d);
  EXPECT_EQ(d.data<float>()[0], float(1.0 / 3.0));
}

TEST(OpElementwise, SumSquaresMatchesReference) {
  // Double accumulation of O(1) terms: relative error ~1e-16 * log(n); 1e-13 is loose.
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(4097), int64_t(100003)}) {
    for (DType dt : {DType::F32, DType::F64}) {
      const Tensor x = random_tensor({n}, dt, uint64_t(n));
      long double ref = 0;
      for (int64_t i = 0; i < n; ++i) ref += (long double)x.get_flat(i) * x.get_flat(i);
      EXPECT_NEAR(sum_squares(x), double(ref), 1e-13 * double(ref)) << n << " " << dtype_name(dt);
    }
  }
  EXPECT_EQ(sum_squares(Tensor::empty({0}, DType::F32)), 0.0);
}

TEST(OpElementwise, SumSquaresSameBitsForAnyThreadCount) {
  const int64_t n = (1 << 20) + 13;  // many blocks, a ragged last one
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = random_tensor({n}, dt, 9, -3.0, 3.0);
    const std::vector<double> results = under_thread_counts([&] { return sum_squares(x); });
    for (size_t r = 1; r < results.size(); ++r)
      EXPECT_EQ(std::memcmp(&results[0], &results[r], sizeof(double)), 0)
          << dtype_name(dt) << ": " << results[0] << " vs " << results[r];
  }
}

TEST(OpElementwise, BadArgumentsNameTheArgument) {
  const Tensor a = random_tensor({3, 7}, DType::F32, 1);
  expect_error([&] { add(a, Tensor::empty({3, 6}, DType::F32), Tensor::empty({3, 7}, DType::F32)); }, {"b", "[3, 7]"});
  expect_error([&] { add(a, a, Tensor::empty({3, 7}, DType::F64)); }, {"out", "same dtype"});
  expect_error([&] { add(a, a, Tensor::empty({7, 3}, DType::F32).transpose(0, 1)); }, {"out must be contiguous"});
  expect_error([&] { add(Tensor::empty({3, 7}, DType::I32), a, a); }, {"a", "floating"});
  expect_error([&] { scale_(a.transpose(0, 1), 2.0); }, {"x must be contiguous"});
  expect_error([&] { scale_(Tensor(), 2.0); }, {"x", "undefined"});
  expect_error([&] { fill_(Tensor::empty({3}, DType::I32), std::nan("")); }, {"integer"});
  expect_error([&] { cast(a, Tensor::empty({3, 6}, DType::BF16)); }, {"dst", "[3, 7]"});
  expect_error([&] { cast(a, Tensor::empty({3, 7}, DType::I32)); }, {"dst", "floating"});
  expect_error([&] { cast(a.transpose(0, 1), Tensor::empty({7, 3}, DType::BF16)); }, {"src must be contiguous"});
  expect_error([&] { sum_squares(Tensor::empty({4}, DType::I64)); }, {"x", "floating"});
  expect_error([&] { sum_squares(Tensor::zeros({4}, DType::BF16)); }, {"bfloat16", "not implemented on the CPU"});
}

}  // namespace
}  // namespace fsdp::test
