// The core Tensor: views share storage and index correctly, contiguity is tracked, bad
// views and accesses give clear errors, the allocator counts bytes and the peak, and the
// 16-bit float conversions of dtype.h are exact / correctly rounded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "fsdp/core/tensor.h"
#include "test_util.h"

namespace fsdp::test {
namespace {

// [4, 6] float32 holding 0, 1, ..., 23 in row-major order.
Tensor arange_4x6() {
  Tensor t = Tensor::empty({4, 6}, DType::F32);
  for (int64_t i = 0; i < 24; ++i) t.set_flat(i, double(i));
  return t;
}

TEST(Tensor, ContiguousBasics) {
  const Tensor t = arange_4x6();
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides(), (Dims{6, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.get({2, 3}), 15.0);
  EXPECT_EQ(t.at<float>({3, 5}), 23.0f);
  EXPECT_EQ(t.size(-1), 6);
  EXPECT_EQ(t.str(), "float32[4, 6] on cpu");
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, NarrowSharesStorage) {
  const Tensor t = arange_4x6();
  const Tensor v = t.narrow(1, 2, 3);
  EXPECT_EQ(v.storage(), t.storage());
  EXPECT_EQ(v.sizes(), (Dims{4, 3}));
  EXPECT_EQ(v.strides(), (Dims{6, 1}));
  EXPECT_EQ(v.offset(), 2);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_TRUE(v.rows_packed());
  EXPECT_EQ(v.get({1, 0}), 8.0);
  EXPECT_EQ(v.get_flat(4), 9.0);  // logical row-major index: row 1, column 1
  v.set({3, 2}, -1.0);
  EXPECT_EQ(t.get({3, 4}), -1.0);
  // A single row of a contiguous tensor is itself contiguous (size-1 dims do not count).
  EXPECT_TRUE(t.narrow(0, 1, 1).is_contiguous());
  EXPECT_EQ(t.narrow(0, 1, 2).data<float>()[0], 6.0f);
}

TEST(Tensor, SliceWithStep) {
  const Tensor t = arange_4x6();
  const Tensor s = t.slice(1, 1, 6, 2);  // columns 1, 3, 5
  EXPECT_EQ(s.sizes(), (Dims{4, 3}));
  EXPECT_EQ(s.strides(), (Dims{6, 2}));
  EXPECT_FALSE(s.rows_packed());
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(s.get({r, k}), t.get({r, 1 + 2 * k}));
  EXPECT_EQ(t.slice(1, 0, 5, 2).size(1), 3);  // ceil(5 / 2)
  EXPECT_EQ(t.slice(0, 2, 2).numel(), 0);     // empty slice
  EXPECT_TRUE(t.narrow(1, 3, 0).is_contiguous());  // empty views are trivially contiguous
  s.set({0, 2}, 100.0);
  EXPECT_EQ(t.get({0, 5}), 100.0);
}

TEST(Tensor, SelectDropsADimension) {
  const Tensor t = arange_4x6();
  const Tensor row = t.select(0, 2);
  EXPECT_EQ(row.sizes(), (Dims{6}));
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.get({0}), 12.0);
  const Tensor col = t.select(1, 3);
  EXPECT_EQ(col.sizes(), (Dims{4}));
  EXPECT_EQ(col.strides(), (Dims{6}));
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.get({2}), 15.0);
  col.set({1}, 7.5);
  EXPECT_EQ(t.get({1, 3}), 7.5);
  EXPECT_EQ(t.select(-1, 0).get({3}), 18.0);  // negative dims wrap
}

TEST(Tensor, ReshapeAndTranspose) {
  const Tensor t = arange_4x6();
  const Tensor r = t.reshape({-1, 3});
  EXPECT_EQ(r.sizes(), (Dims{8, 3}));
  EXPECT_EQ(r.storage(), t.storage());
  EXPECT_EQ(r.get({5, 1}), 16.0);
  EXPECT_EQ(t.reshape({2, -1, 3}).sizes(), (Dims{2, 4, 3}));
  EXPECT_EQ(t.flatten().sizes(), (Dims{24}));

  const Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.sizes(), (Dims{6, 4}));
  EXPECT_EQ(tt.strides(), (Dims{1, 6}));
  EXPECT_FALSE(tt.is_contiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(tt.get({j, i}), t.get({i, j}));
  EXPECT_EQ(tt.get_flat(1), 6.0);  // logical index walks tt's rows: tt[0, 1] = t[1, 0]
  EXPECT_TRUE(tt.transpose(0, 1).is_contiguous());

  // clone and to() give contiguous copies in logical order.
  const Tensor c = tt.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.data<float>()[1], 6.0f);
  const Tensor d = tt.to(DType::F64);
  EXPECT_EQ(d.data<double>()[5], 7.0);  // flat 5 of [6, 4] is tt[1, 1] = t[1, 1]
}

TEST(Tensor, ViewAndAccessErrors) {
  const Tensor t = arange_4x6();
  expect_error([&] { t.narrow(1, 4, 3); }, {"narrow(1, 4, 3) out of range", "float32[4, 6]"});
  expect_error([&] { t.slice(0, 1, 5); }, {"slice(0, 1, 5) out of range"});
  expect_error([&] { t.slice(0, 0, 4, 0); }, {"step must be positive"});
  expect_error([&] { t.select(0, 4); }, {"select(0, 4) out of range"});
  expect_error([&] { t.transpose(0, 2); }, {"dimension 2 out of range"});
  expect_error([&] { t.reshape({5, -1}); }, {"cannot reshape", "[5, -1]"});
  expect_error([&] { t.reshape({5, 5}); }, {"element counts differ"});
  expect_error([&] { t.reshape({-1, -1}); }, {"only one extent may be -1"});
  expect_error([&] { t.transpose(0, 1).reshape({24}); }, {"reshape of non-contiguous"});
  expect_error([&] { t.data<double>(); }, {"accessed as float64"});
  expect_error([&] { t.at<int32_t>({0, 0}); }, {"accessed as int32"});
  expect_error([&] { t.get({4, 0}); }, {"index 4 out of range for dimension 0"});
  expect_error([&] { t.get({0}); }, {"index with 1 components"});
  expect_error([&] { t.get_flat(24); }, {"flat index 24 out of range"});
  expect_error([&] { Tensor().data_ptr(); }, {"undefined tensor"});
  expect_error([&] { t.copy_(Tensor::empty({6, 4}, DType::F32)); }, {"shapes differ"});
  expect_error([&] { check_shape(t, Dims{4, 5}, "weight"); }, {"weight must have shape [4, 5]"});
  expect_error([&] { Tensor::empty({2, -1}, DType::F32); }, {"negative extent"});
}

TEST(Tensor, AllocatorCountsBytesAndPeak) {
  Allocator& a = allocator_for(Device::cpu());
  const MemoryStats s0 = a.stats();
  a.reset_peak();
  {
    const Tensor x = Tensor::empty({1000}, DType::F32);
    const Tensor y = Tensor::empty({10}, DType::F64);
    const MemoryStats s1 = a.stats();
    EXPECT_EQ(s1.current_bytes, s0.current_bytes + 4080);
    EXPECT_EQ(s1.num_allocs, s0.num_allocs + 2);
    EXPECT_GE(s1.peak_bytes, s1.current_bytes);
    const Tensor v = x.narrow(0, 10, 20);  // a view allocates nothing
    float buf[4];
    const Tensor b = Tensor::from_blob(buf, {4}, DType::F32);  // borrowed memory: not counted
    EXPECT_EQ(a.stats().num_allocs, s1.num_allocs);
    EXPECT_EQ(a.stats().current_bytes, s1.current_bytes);
  }
  const MemoryStats s2 = a.stats();
  EXPECT_EQ(s2.current_bytes, s0.current_bytes);
  EXPECT_EQ(s2.peak_bytes, s0.current_bytes + 4080);  // the high-water mark stays
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, s0.current_bytes);
}

TEST(Tensor, HalfConversionsInDtypeHeader) {
  // f16 -> float is exact for all 65536 patterns (NaN stays NaN); float -> f16 rounds to
  // nearest even like the compiler's _Float16 on random floats; bf16 round trips.
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const f16 h{uint16_t(b)};
    _Float16 ref;
    std::memcpy(&ref, &h.bits, 2);
    const float f = f16_to_float(h);
    // bf16 -> float -> bf16 is the identity, except that a signalling NaN comes back quiet.
    ASSERT_EQ(float_to_bf16(bf16_to_float(bf16{uint16_t(b)})).bits, (b & 0x7fffu) > 0x7f80u ? (b | 0x40u) : b)
        << b;
    if (std::isnan(float(ref))) {
      ASSERT_TRUE(std::isnan(f)) << b;
      continue;
    }
    ASSERT_EQ(f, float(ref)) << b;
    ASSERT_EQ(float_to_f16(f).bits, h.bits) << b;
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const _Float16 ref = _Float16(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(float_to_f16(f).bits, rb) << std::hex << u;
  }
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f).bits, 0x3f80);  // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7c00);  // overflow tie -> inf

  // load_as_double / store_from_double, names and parsing.
  unsigned char buf[8];
  store_from_double(buf, DType::BF16, 3.0);
  EXPECT_EQ(load_as_double(buf, DType::BF16), 3.0);
  store_from_double(buf, DType::I64, -7.9);
  EXPECT_EQ(load_as_double(buf, DType::I64), -7.0);  // integer targets truncate
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_STREQ(dtype_name(DType::F16), "float16");
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("fp32"), DType::F32);
  expect_error([] { parse_dtype("float8"); }, {"unknown dtype 'float8'"});
}

}  // namespace
}  // namespace fsdp::test
