// CUDA NF4 dequantization against the CPU's, bit for bit: both compute each block's absmax
// and each weight as separate round-to-nearest float32 operations (no FMA: __fmul_rn /
// __fadd_rn on the GPU, cpu::rounded on the host), so float32 and float64 outputs are the
// CPU's exact values, and bfloat16/float16 outputs are the CPU's float32 result rounded once
// (or twice, through the weight's dtype, identically on both sides). Cases: one block, an
// odd number of blocks, 300 blocks (two nested groups, the second partial), each weight
// dtype (float32, bfloat16, float16) into each output dtype; pieces from our quantizer and
// from random bytes (every code and every absmax code reached); and bitsandbytes' own
// fixture pieces (tests/golden/nf4), whose CPU dequantization test_op_nf4 holds to
// bitsandbytes'. No tolerance: identical bits or a failure.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "backend_case.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/ops/nf4.h"

namespace fsdp::test {
namespace {

struct Pieces {
  Tensor packed, absmax, nested_absmax, nested_code, offset, code;
  Nf4Tensors view() const { return Nf4Tensors{packed, absmax, nested_absmax, nested_code, offset, code}; }
  Pieces to(Device d) const {
    return Pieces{on_device(packed, d),      on_device(absmax, d), on_device(nested_absmax, d),
                  on_device(nested_code, d), on_device(offset, d), on_device(code, d)};
  }
};

Pieces empty_pieces(int64_t n) {
  return Pieces{Tensor::zeros({nf4_packed_bytes(n)}, DType::U8), Tensor::zeros({nf4_blocks(n)}, DType::U8),
                Tensor::zeros({nf4_nested_blocks(n)}, DType::F32), Tensor::zeros({256}, DType::F32),
                Tensor::zeros({1}, DType::F32), Tensor::zeros({16}, DType::F32)};
}

Pieces quantized(int64_t n, uint64_t seed) {
  Pieces p = empty_pieces(n);
  nf4_quantize(random_tensor({n}, DType::F32, seed, -0.5, 0.5), p.view(), "w");
  return p;
}

// Random bytes for the codes and the absmax codes, random nested statistics: reaches every
// table entry the kernel can index.
Pieces scrambled(int64_t n, uint64_t seed) {
  Pieces p = quantized(n, seed);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < p.packed.numel(); ++i) p.packed.data<uint8_t>()[i] = uint8_t(rng());
  for (int64_t i = 0; i < p.absmax.numel(); ++i) p.absmax.data<uint8_t>()[i] = uint8_t(rng());
  for (int64_t i = 0; i < p.nested_absmax.numel(); ++i)
    p.nested_absmax.data<float>()[i] = float(std::uniform_real_distribution<double>(0.001, 3.0)(rng));
  p.offset.data<float>()[0] = 0.37f;
  return p;
}

void expect_cpu_bits(const Pieces& host, DType value_dtype, const std::string& what) {
  const int64_t n = host.packed.numel() * 2;
  const Pieces dev = host.to(kGpu);
  for (DType out : kFloatTypes) {
    SCOPED_TRACE(what + " value " + dtype_name(value_dtype) + " into " + dtype_name(out));
    Tensor ref = Tensor::empty({n}, reference_dtype(out));
    nf4_dequantize(host.view(), value_dtype, ref);
    Tensor got = Tensor::empty({n}, out, kGpu);
    nf4_dequantize(dev.view(), value_dtype, got);
    EXPECT_TRUE(identical(on_cpu(got), rounded_to(ref, out)));
  }
}

TEST_F(CudaOps, Nf4DequantizeMatchesCpuBitForBit) {
  for (int64_t blocks : {1, 7, 300}) {
    const int64_t n = blocks * 64;
    for (DType value : {DType::F32, DType::BF16, DType::F16}) {
      expect_cpu_bits(quantized(n, uint64_t(n)), value, "quantized n=" + std::to_string(n));
      expect_cpu_bits(scrambled(n, uint64_t(n) + 1), value, "scrambled n=" + std::to_string(n));
    }
  }
}

// A tensor-parallel slice (nf4.h, "A slice": packed codes and a float absmax' per block)
// against the CPU's dequantization of the same slice: the kernel's other absmax path.
TEST_F(CudaOps, Nf4DequantizeOfASliceMatchesCpu) {
  for (int64_t blocks : {1, 7, 300}) {
    const int64_t n = blocks * 64;
    const Pieces whole = scrambled(n, uint64_t(n) + 2);
    Nf4Tensors host;
    host.packed = whole.packed;
    host.code = whole.code;
    host.block_absmax = Tensor::empty({blocks}, DType::F32);
    nf4_block_absmax(whole.view(), host.block_absmax);
    Nf4Tensors dev;
    dev.packed = on_device(host.packed, kGpu);
    dev.code = on_device(host.code, kGpu);
    dev.block_absmax = on_device(host.block_absmax, kGpu);
    for (DType value : {DType::F32, DType::BF16}) {
      for (DType out : kFloatTypes) {
        SCOPED_TRACE("slice n=" + std::to_string(n) + " value " + dtype_name(value) + " into " + dtype_name(out));
        Tensor ref = Tensor::empty({n}, reference_dtype(out));
        nf4_dequantize(host, value, ref);
        Tensor want = Tensor::empty({n}, reference_dtype(out));
        nf4_dequantize(whole.view(), value, want);
        EXPECT_TRUE(identical(ref, want));  // the slice of every block is the whole
        Tensor got = Tensor::empty({n}, out, kGpu);
        nf4_dequantize(dev, value, got);
        EXPECT_TRUE(identical(on_cpu(got), rounded_to(ref, out)));
      }
    }
  }
}

TEST_F(CudaOps, Nf4DequantizeOfBitsandbytesPiecesMatchesCpu) {
  const ckpt::SafetensorsFile f(source_path("tests/golden/nf4/expected.safetensors"));
  auto raw = [&](const std::string& name, DType dtype) {
    const ckpt::TensorEntry& e = f.entry(name);
    Tensor t = Tensor::empty({int64_t(e.nbytes / dtype_size(dtype))}, dtype);
    std::memcpy(t.data_ptr(), e.data, e.nbytes);
    return t;
  };
  for (const std::string t : {"bf16_big", "f32", "f16", "edge"}) {
    const Pieces p{raw(t + ".packed", DType::U8),        raw(t + ".absmax", DType::U8),
                   raw(t + ".nested_absmax", DType::F32), raw(t + ".nested_quant_map", DType::F32),
                   raw(t + ".offset", DType::F32),        raw(t + ".quant_map", DType::F32)};
    const std::string d = f.entry(t + ".input").dtype;
    expect_cpu_bits(p, d == "BF16" ? DType::BF16 : d == "F16" ? DType::F16 : DType::F32, t);
  }
}

}  // namespace
}  // namespace fsdp::test
