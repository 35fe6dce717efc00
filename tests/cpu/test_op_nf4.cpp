// NF4 on the CPU against bitsandbytes (tests/golden/nf4, written by
// tests/golden/generate_peft.py with bitsandbytes 0.47.0 on a CPU): the two tables, and for
// a bfloat16 tensor of 264 blocks (two nested groups, the second partial), a float32 and a
// float16 tensor, and a tensor of awkward blocks (zeros, exact ties between codes, -0,
// subnormals, 1e30, all equal, an outlier):
//   - our quantization gives bitsandbytes' packed codes, quantized absmax and nested absmax
//     bit for bit (given its offset: see nf4.h on how torch rounds the mean), and our own
//     offset is within one float32 ulp of it;
//   - dequantizing bitsandbytes' own pieces gives its per-block absmax and its weights bit
//     for bit (rounded once into the weight's dtype, as its CUDA kernel does);
//   - quantize then dequantize stays within the NF4 grid's half gap of every weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/ops/nf4.h"
#include "test_util.h"

namespace fsdp {
namespace {

const char* const kTensors[] = {"bf16_big", "f32", "f16", "edge"};

class Nf4Bitsandbytes : public ::testing::Test {
 protected:
  void SetUp() override { file_ = std::make_unique<ckpt::SafetensorsFile>(test::source_path("tests/golden/nf4/expected.safetensors")); }

  const ckpt::TensorEntry& entry(const std::string& name) const { return file_->entry(name); }

  // The fixture's tensor as raw bytes in a host tensor of `dtype`.
  Tensor raw(const std::string& name, DType dtype) const {
    const ckpt::TensorEntry& e = entry(name);
    Tensor t = Tensor::empty({int64_t(e.nbytes / dtype_size(dtype))}, dtype);
    std::memcpy(t.data_ptr(), e.data, e.nbytes);
    return t;
  }
  // The fixture's float tensor (any float dtype) as float32 values.
  Tensor floats(const std::string& name) const {
    const ckpt::TensorEntry& e = entry(name);
    Tensor t = Tensor::empty({e.numel()}, DType::F32);
    ckpt::read_as_f32(e, t.data<float>());
    return t;
  }
  DType value_dtype(const std::string& tensor) const {
    const std::string d = entry(tensor + ".input").dtype;
    return d == "BF16" ? DType::BF16 : d == "F16" ? DType::F16 : DType::F32;
  }
  // Host pieces for a weight of n elements.
  static Nf4Tensors pieces(int64_t n) {
    return Nf4Tensors{Tensor::zeros({nf4_packed_bytes(n)}, DType::U8), Tensor::zeros({nf4_blocks(n)}, DType::U8),
                      Tensor::zeros({nf4_nested_blocks(n)}, DType::F32), Tensor::zeros({256}, DType::F32),
                      Tensor::zeros({1}, DType::F32),                     Tensor::zeros({16}, DType::F32)};
  }
  Nf4Tensors theirs(const std::string& t) const {
    return Nf4Tensors{raw(t + ".packed", DType::U8),        raw(t + ".absmax", DType::U8),
                      raw(t + ".nested_absmax", DType::F32), raw(t + ".nested_quant_map", DType::F32),
                      raw(t + ".offset", DType::F32),        raw(t + ".quant_map", DType::F32)};
  }

  std::unique_ptr<ckpt::SafetensorsFile> file_;
};

void expect_same_bytes(const Tensor& ours, const Tensor& theirs, const std::string& what) {
  ASSERT_EQ(ours.nbytes(), theirs.nbytes()) << what;
  const auto* a = static_cast<const uint8_t*>(ours.data_ptr());
  const auto* b = static_cast<const uint8_t*>(theirs.data_ptr());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < ours.nbytes(); ++i)
    if (a[i] != b[i]) differ += 1, first = first < 0 ? int64_t(i) : first;
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << ours.nbytes() << " bytes differ, first at " << first;
}

TEST_F(Nf4Bitsandbytes, TablesAreBitsandbytesTables) {
  for (const char* t : kTensors) {
    expect_same_bytes(Tensor::from_blob(const_cast<float*>(kNf4Code), {16}, DType::F32),
                      raw(std::string(t) + ".quant_map", DType::F32), "quant_map");
    expect_same_bytes(Tensor::from_blob(const_cast<float*>(kNf4DynamicMap), {256}, DType::F32),
                      raw(std::string(t) + ".nested_quant_map", DType::F32), "nested_quant_map");
  }
}

TEST_F(Nf4Bitsandbytes, QuantizationGivesBitsandbytesBytes) {
  for (const char* name : kTensors) {
    const std::string t = name;
    const Tensor input = floats(t + ".input");
    const int64_t n = input.numel();
    const Tensor offset = raw(t + ".offset", DType::F32);
    const Nf4Tensors ours = pieces(n);
    nf4_quantize(input, ours, t.c_str(), offset.data<float>()[0]);
    const Nf4Tensors ref = theirs(t);
    expect_same_bytes(ours.packed, ref.packed, t + ".packed");
    expect_same_bytes(ours.absmax, ref.absmax, t + ".absmax");
    expect_same_bytes(ours.nested_absmax, ref.nested_absmax, t + ".nested_absmax");
    expect_same_bytes(ours.nested_code, ref.nested_code, t + ".nested_quant_map");
    expect_same_bytes(ours.code, ref.code, t + ".quant_map");

    // Our own offset: torch's float32 mean up to its summation order.
    const Nf4Tensors own = pieces(n);
    nf4_quantize(input, own, t.c_str());
    const float a = own.offset.data<float>()[0], b = offset.data<float>()[0];
    EXPECT_LE(std::fabs(a - b), std::fabs(std::nextafter(b, 2 * b) - b)) << t << ": offset " << a << " vs " << b;
  }
}

TEST_F(Nf4Bitsandbytes, DequantizationGivesBitsandbytesValues) {
  for (const char* name : kTensors) {
    const std::string t = name;
    const Nf4Tensors ref = theirs(t);
    const Tensor want = floats(t + ".dequantized");
    Tensor got = Tensor::empty({want.numel()}, DType::F32);
    nf4_dequantize(ref, value_dtype(t), got);
    expect_same_bytes(got, want, t + " dequantized");
    // Each block's absmax: a weight of 64 ones in a block shows it.
    const Tensor block_absmax = raw(t + ".block_absmax", DType::F32);
    const int64_t blocks = block_absmax.numel();
    Nf4Tensors ones = ref;
    ones.packed = Tensor::empty({blocks * 32}, DType::U8);
    for (int64_t i = 0; i < blocks * 32; ++i) ones.packed.data<uint8_t>()[i] = 0xff;  // code 15 = 1.0
    Tensor scale = Tensor::empty({blocks * 64}, DType::F32);
    nf4_dequantize(ones, DType::F32, scale);
    for (int64_t j = 0; j < blocks; ++j)
      ASSERT_EQ(scale.data<float>()[j * 64], block_absmax.data<float>()[j]) << t << " block " << j;
  }
}

// A tensor-parallel slice's pieces (nf4.h, "A slice"): the whole's packed bytes of some of
// its blocks and their absmax' from nf4_block_absmax. Every other block, as a column slice
// takes its blocks strided through the nested groups, dequantizes to the whole's values of
// those blocks bit for bit, for every fixture tensor (bitsandbytes' own pieces).
TEST_F(Nf4Bitsandbytes, SliceDequantizesToTheWholesBlocksBitForBit) {
  for (const char* name : kTensors) {
    const std::string t = name;
    const Nf4Tensors whole = theirs(t);
    const int64_t blocks = whole.absmax.numel(), n = blocks * 64;
    Tensor all = Tensor::empty({n}, DType::F32);
    nf4_dequantize(whole, value_dtype(t), all);
    Tensor absmax = Tensor::empty({blocks}, DType::F32);
    nf4_block_absmax(whole, absmax);
    const int64_t kept = (blocks + 1) / 2;
    Nf4Tensors slice;
    slice.packed = Tensor::empty({kept * 32}, DType::U8);
    slice.block_absmax = Tensor::empty({kept}, DType::F32);
    slice.code = whole.code;
    Tensor want = Tensor::empty({kept * 64}, DType::F32);
    for (int64_t j = 0; j < kept; ++j) {
      std::memcpy(slice.packed.data<uint8_t>() + j * 32, whole.packed.data<uint8_t>() + 2 * j * 32, 32);
      slice.block_absmax.data<float>()[j] = absmax.data<float>()[2 * j];
      std::memcpy(want.data<float>() + j * 64, all.data<float>() + 2 * j * 64, 64 * sizeof(float));
    }
    Tensor got = Tensor::empty({kept * 64}, DType::F32);
    nf4_dequantize(slice, value_dtype(t), got);
    expect_same_bytes(got, want, t + " every other block");
  }
}

// float64 output holds the float32 values exactly (the CPU reference for the CUDA test).
TEST_F(Nf4Bitsandbytes, Float64OutputWidensTheFloat32Values) {
  const Nf4Tensors ref = theirs("f32");
  const int64_t n = floats("f32.input").numel();
  Tensor f = Tensor::empty({n}, DType::F32), d = Tensor::empty({n}, DType::F64);
  nf4_dequantize(ref, DType::F32, f);
  nf4_dequantize(ref, DType::F32, d);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(d.data<double>()[i], double(f.data<float>()[i])) << i;
}

// Round trip on odd sizes: every weight comes back within half the widest gap of the NF4
// grid (0.16, between -1 and -0.696) times its block's absmax, plus the 8-bit absmax error.
TEST(Nf4, RoundTripStaysOnTheGrid) {
  for (int64_t n : {64, 64 * 7, 64 * 257, 64 * 513}) {
    const Tensor w = test::random_tensor({n}, DType::F32, uint64_t(n), -0.3, 0.3);
    Nf4Tensors q{Tensor::zeros({nf4_packed_bytes(n)}, DType::U8), Tensor::zeros({nf4_blocks(n)}, DType::U8),
                 Tensor::zeros({nf4_nested_blocks(n)}, DType::F32), Tensor::zeros({256}, DType::F32),
                 Tensor::zeros({1}, DType::F32), Tensor::zeros({16}, DType::F32)};
    nf4_quantize(w, q, "w");
    Tensor back = Tensor::empty({n}, DType::F32);
    nf4_dequantize(q, DType::F32, back);
    for (int64_t j = 0; j < n / 64; ++j) {
      float amax = 0;
      for (int64_t i = 0; i < 64; ++i) amax = std::fmax(amax, std::fabs(w.data<float>()[j * 64 + i]));
      for (int64_t i = 0; i < 64; ++i) {
        const float a = w.data<float>()[j * 64 + i], b = back.data<float>()[j * 64 + i];
        ASSERT_LE(std::fabs(a - b), amax * (0.1520f + 0.02f)) << "n " << n << " element " << j * 64 + i;
      }
    }
  }
}

TEST(Nf4, BadArgumentsNameTheProblem) {
  const Tensor w = Tensor::zeros({100}, DType::F32);
  Nf4Tensors q{Tensor::zeros({50}, DType::U8), Tensor::zeros({1}, DType::U8), Tensor::zeros({1}, DType::F32),
               Tensor::zeros({256}, DType::F32), Tensor::zeros({1}, DType::F32), Tensor::zeros({16}, DType::F32)};
  test::expect_error([&] { nf4_quantize(w, q, "layers.0.wq"); },
                     {"layers.0.wq", "100 elements", "not a multiple of the NF4 block size 64"});
  test::expect_error([&] { nf4_dequantize(q, DType::F32, Tensor::empty({100}, DType::F32)); },
                     {"not a multiple of the block size 64"});
  test::expect_error([&] { nf4_dequantize(q, DType::F32, Tensor::empty({128}, DType::F32)); },
                     {"nf4: packed holds 50 elements, a weight of 128 needs 64"});
  test::expect_error([&] { nf4_dequantize(q, DType::F64, Tensor::empty({128}, DType::F32)); },
                     {"float32, bfloat16 or float16"});
}

}  // namespace
}  // namespace fsdp
