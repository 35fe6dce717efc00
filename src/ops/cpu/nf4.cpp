// NF4 on the CPU: the dequantizer (the reference every backend is held to) and, beside it,
// the host quantizer that inverts it, each step written as bitsandbytes 0.47 computes it on
// a CPU (backends/default/ops.py quantize_4bit for the codes, csrc/common.cpp
// quantize_block for the nested absmax), so the bytes match its bytes. The math and the
// storage are in fsdp/ops/nf4.h. Dequantization rounds code * absmax once into the
// weight's dtype, as bitsandbytes' CUDA kernel does (its CPU fallback rounds the code
// itself to bfloat16/float16 first; the two agree for float32 and differ by at most one
// ulp of the 16-bit dtype otherwise).
//
// Rounding: every product, quotient and sum is one float32 operation; products that feed a
// sum or a difference go through cpu::rounded (rounded.h) so that no FMA fuses them.
// Ties in "nearest code" go to the lower index, as torch.argmin and the C++ search do.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../nf4_checks.h"
#include "fsdp/core/dtype.h"
#include "fsdp/ops/nf4.h"
#include "rounded.h"
#include "unsupported.h"

namespace fsdp {
namespace {

// A float32 value as the weight's dtype holds it (quant_state.dtype), back in float32.
float round_to(DType value_dtype, float v) {
  if (value_dtype == DType::BF16) return bf16_to_float(float_to_bf16(v));
  if (value_dtype == DType::F16) return f16_to_float(float_to_f16(v));
  return v;
}

// Block j's absmax from its 8-bit code: code2[q] * nested_absmax[j / 256] + offset.
float block_absmax(const uint8_t* absmax_q, const float* nested_absmax, const float* nested_code, float offset,
                   int64_t j) {
  const float scaled = cpu::rounded(nested_code[absmax_q[j]] * nested_absmax[j / kNf4NestedBlockSize]);
  return scaled + offset;
}

// Each block's absmax': from its 8-bit code for a whole weight, as stored for a slice.
struct AbsmaxOf {
  const uint8_t* absmax_q = nullptr;
  const float* nested_absmax = nullptr;
  const float* nested_code = nullptr;
  float offset = 0;
  const float* plain = nullptr;  // a slice's block_absmax

  explicit AbsmaxOf(const Nf4Tensors& w) {
    if (w.sliced()) {
      plain = w.block_absmax.data<float>();
      return;
    }
    absmax_q = w.absmax.data<uint8_t>();
    nested_absmax = w.nested_absmax.data<float>();
    nested_code = w.nested_code.data<float>();
    offset = w.offset.data<float>()[0];
  }
  float operator()(int64_t j) const {
    return plain != nullptr ? plain[j] : block_absmax(absmax_q, nested_absmax, nested_code, offset, j);
  }
};

template <typename T>
void dequantize_impl(const Nf4Tensors& w, DType value_dtype, const Tensor& out_t) {
  const int64_t blocks = nf4_blocks(out_t.numel());
  const auto* packed = w.packed.data<uint8_t>();
  const float* code = w.code.data<float>();
  const AbsmaxOf absmax_of(w);
  T* out = out_t.data<T>();
#pragma omp parallel for schedule(static) if (blocks >= 256)
  for (int64_t j = 0; j < blocks; ++j) {
    const float absmax = absmax_of(j);
    const uint8_t* bytes = packed + j * (kNf4BlockSize / 2);
    T* o = out + j * kNf4BlockSize;
    for (int64_t m = 0; m < kNf4BlockSize / 2; ++m) {
      const float hi = code[bytes[m] >> 4] * absmax;
      const float lo = code[bytes[m] & 0x0f] * absmax;
      o[2 * m] = T(round_to(value_dtype, hi));
      o[2 * m + 1] = T(round_to(value_dtype, lo));
    }
  }
}

void nf4_dequantize_cpu(const Nf4Tensors& w, DType value_dtype, const Tensor& out) {
  switch (out.dtype()) {
    case DType::F32: return dequantize_impl<float>(w, value_dtype, out);
    case DType::F64: return dequantize_impl<double>(w, value_dtype, out);
    default: cpu::unsupported("nf4_dequantize", out.dtype());
  }
}

// The index of the NF4 value nearest to x, the first on a tie (torch.argmin over the 16
// distances). A NaN x (a block of zeros divided by its zero absmax) compares false
// everywhere and gets index 0, which is what torch.argmin returns for NaN distances.
uint8_t nearest_nf4(float x) {
  int best = 0;
  float best_distance = std::fabs(x - kNf4Code[0]);
  for (int k = 1; k < 16; ++k) {
    const float d = std::fabs(x - kNf4Code[k]);
    if (d < best_distance) best = k, best_distance = d;
  }
  return uint8_t(best);
}

// The dynamic-map entry for x as bitsandbytes' quantize_cpu finds it: the last entry <= x
// (its binary search), moved one up when that one is strictly nearer.
uint8_t nearest_dynamic(float x) {
  const float* map = kNf4DynamicMap;
  int64_t i = int64_t(std::upper_bound(map, map + 256, x) - map) - 1;
  i = std::clamp<int64_t>(i, 0, 255);
  if (i < 255 && std::fabs(x - map[i + 1]) < std::fabs(x - map[i])) ++i;
  return uint8_t(i);
}

// 4-bit codes and per-block absmax (bitsandbytes 0.47's CPU quantize_4bit, its "default"
// kernel): absmax = max |w|, s = clamp(w * (1 / absmax), -1, 1) (a reciprocal, then a
// product: not a quotient), then argmin_k |s - code[k]|.
void quantize_blocks(const float* v, int64_t blocks, uint8_t* packed, float* absmax) {
#pragma omp parallel for schedule(static) if (blocks >= 256)
  for (int64_t j = 0; j < blocks; ++j) {
    const float* b = v + j * kNf4BlockSize;
    float amax = 0.0f;
    for (int64_t i = 0; i < kNf4BlockSize; ++i) amax = std::fmax(amax, std::fabs(b[i]));
    absmax[j] = amax;
    const float inv = 1.0f / amax;
    auto code_of = [inv](float w) {
      const float s = cpu::rounded(w * inv);  // NaN for a block of zeros (0 * inf): argmin gives 0
      return nearest_nf4(s != s ? s : std::clamp(s, -1.0f, 1.0f));
    };
    for (int64_t m = 0; m < kNf4BlockSize / 2; ++m)
      packed[j * (kNf4BlockSize / 2) + m] = uint8_t(code_of(b[2 * m]) << 4 | code_of(b[2 * m + 1]));
  }
}

// The absmax's mean, summed in double in index order, divided and rounded once to float32:
// the same on every machine (the terms are non-negative, so double's 29 extra bits keep
// the sum far below float's rounding step for any weight's block count).
float mean_of(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]);
  return float(s / double(n));
}

// Double quantization (bitsandbytes' quantize_blockwise over absmax - offset, blocks of 256,
// its CPU quantize_cpu): each group's max |x|, then the nearest dynamic-map entry of
// x / max, ties to the lower entry.
void quantize_absmax(const float* absmax, int64_t blocks, float offset, uint8_t* absmax_q, float* nested_absmax) {
  const int64_t groups = (blocks + kNf4NestedBlockSize - 1) / kNf4NestedBlockSize;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kNf4NestedBlockSize;
    const int64_t end = std::min(blocks, begin + kNf4NestedBlockSize);
    float amax = 0.0f;
    for (int64_t j = begin; j < end; ++j) amax = std::fmax(amax, std::fabs(absmax[j] - offset));
    nested_absmax[g] = amax;
    for (int64_t j = begin; j < end; ++j) absmax_q[j] = nearest_dynamic((absmax[j] - offset) / amax);
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(nf4_dequantize_stub, DeviceType::CPU, &nf4_dequantize_cpu);

void nf4_block_absmax(const Nf4Tensors& w, const Tensor& out) {
  check_dtype(out, DType::F32, "out");
  check_contiguous(out, "out");
  FSDP_CHECK(out.device().is_cpu() && !w.sliced(), "nf4_block_absmax: a whole weight's pieces into a host tensor");
  const int64_t blocks = out.numel();
  detail::check_nf4_pieces(w, blocks * kNf4BlockSize, Device::cpu());
  const AbsmaxOf absmax_of(w);
  float* o = out.data<float>();
  for (int64_t j = 0; j < blocks; ++j) o[j] = absmax_of(j);
}

void nf4_quantize(const Tensor& values, const Nf4Tensors& w, const char* name, std::optional<float> offset_in) {
  check_defined(values, "values");
  check_dtype(values, DType::F32, "values");
  check_contiguous(values, "values");
  FSDP_CHECK(values.device().is_cpu(), "nf4_quantize runs on the host; {} is on {}", name, values.device().str());
  const int64_t n = values.numel();
  FSDP_CHECK(n % kNf4BlockSize == 0,
             "model.quantization nf4: {} has {} elements, not a multiple of the NF4 block size {}", name, n,
             kNf4BlockSize);
  FSDP_CHECK(!w.sliced(), "nf4_quantize quantizes a whole weight; {} was given a slice's pieces", name);
  detail::check_nf4_pieces(w, n, Device::cpu());
  const int64_t blocks = nf4_blocks(n);
  std::vector<float> absmax(size_t(blocks), 0.0f);
  quantize_blocks(values.data<float>(), blocks, w.packed.data<uint8_t>(), absmax.data());
  const float offset = offset_in ? *offset_in : blocks > 0 ? mean_of(absmax.data(), blocks) : 0.0f;
  w.offset.data<float>()[0] = offset;
  quantize_absmax(absmax.data(), blocks, offset, w.absmax.data<uint8_t>(), w.nested_absmax.data<float>());
  for (int k = 0; k < 256; ++k) w.nested_code.data<float>()[k] = kNf4DynamicMap[k];
  for (int k = 0; k < 16; ++k) w.code.data<float>()[k] = kNf4Code[k];
}

}  // namespace fsdp
