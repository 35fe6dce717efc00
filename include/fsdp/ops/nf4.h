// NF4 weights exactly as bitsandbytes stores them: quantize_4bit(quant_type="nf4",
// blocksize=64, compress_statistics=True), the QLoRA paper's 4-bit NormalFloat with double
// quantization. For a weight of n elements (n a multiple of 64, b = n / 64 blocks):
//
//   absmax[j]      = max_i |w[64j + i]|                                    (float32)
//   q[i]           = argmin_k |w[i] / absmax[i / 64] - kNf4Code[k]|        (float32; first k on a tie)
//   packed[i / 2]  = q[i] << 4 | q[i + 1]   (even i: element 2m in the high nibble of byte m)
//   offset         = mean(absmax)                 (float32; see nf4_quantize on its rounding)
//   nested_absmax[g] = max |absmax[j] - offset| over the 256 blocks j of group g (the last
//                    group may hold fewer)
//   absmax_q[j]    = the entry of the 256-value dynamic map (nested_code) nearest to
//                    (absmax[j] - offset) / nested_absmax[j / 256]           (uint8)
//
// and back:
//   absmax'[j]     = nested_code[absmax_q[j]] * nested_absmax[j / 256] + offset
//   w'[i]          = round_to(value_dtype, code[q[i]] * absmax'[i / 64])
//
// every product and sum a separate float32 operation (bitsandbytes runs them as separate
// kernels: no fused multiply-add), so the CPU and CUDA backends give bitsandbytes' bits.
// value_dtype is the weight's dtype before quantization (quant_state.dtype: bfloat16 for a
// model loaded in bfloat16); the result is then converted to out's dtype, as bitsandbytes'
// dequantize_4bit(...).to(compute dtype) does.
//
// Storage (transformers' serialisation of a Linear4bit, names relative to "<module>.weight"):
//   weight                                     packed        uint8 [n / 2]
//   weight.absmax                              absmax_q      uint8 [n / 64]
//   weight.nested_absmax                       nested_absmax float32 [ceil(n / 64 / 256)]
//   weight.nested_quant_map                    nested_code   float32 [256]
//   weight.quant_map                           code          float32 [16]
//   weight.quant_state.bitsandbytes__nf4       JSON: shape, dtype, blocksize 64, nested_blocksize 256,
//                                              nested_offset (= offset)
// Every piece is a plain array of bytes or floats, so a unit's NF4 weights can live in one
// flat byte buffer that FSDP shards and all-gathers like any other (bnb_4bit_quant_storage).
//
// A slice of a weight quantized whole (tensor parallelism: a rank's rows or columns, each
// block of 64 inside the slice) keeps the whole's packed codes of its blocks, and instead of
// the double-quantized absmax, whose groups of 256 blocks a column slice cuts across, each
// block's absmax' (above) as one process's dequantization computes it:
//   packed        uint8   [n / 2]     the whole's bytes of the slice's blocks, in slice order
//   block_absmax  float32 [n / 64]    absmax'[J] of the whole's block J behind each
//   code          float32 [16]
// so w' = round_to(value_dtype, code[q] * block_absmax[i / 64]): one process's bits.
//
// Quantization runs on the host, at load time (model/frozen_init.h); dequantization runs on
// every backend right before the GEMM that uses the weight.
#pragma once

#include <cstdint>
#include <optional>

#include "fsdp/core/dispatch.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

inline constexpr int64_t kNf4BlockSize = 64;         // elements per absmax
inline constexpr int64_t kNf4NestedBlockSize = 256;  // absmax entries per nested absmax

// The 16 NF4 values (bitsandbytes' get_4bit_type("nf4"), the QLoRA paper's table).
extern const float kNf4Code[16];
// bitsandbytes' create_dynamic_map(signed=True) as its quantize_blockwise uses it (the
// nested_quant_map it saves); tests/golden/nf4 holds the two to each other bit for bit.
extern const float kNf4DynamicMap[256];

// One NF4 weight's pieces (views; any device, all on one). Shapes as in the table above.
// With block_absmax defined it is a slice (above): packed, block_absmax and code are read,
// and absmax, nested_absmax, nested_code and offset stay undefined.
struct Nf4Tensors {
  Tensor packed, absmax, nested_absmax, nested_code, offset, code;  // offset: float32 [1]
  Tensor block_absmax;                                              // a slice's: float32 [n / 64]
  bool sliced() const { return block_absmax.defined(); }
};

// Elements of each piece for a weight of `numel` elements (numel a multiple of 64).
int64_t nf4_packed_bytes(int64_t numel);
int64_t nf4_blocks(int64_t numel);
int64_t nf4_nested_blocks(int64_t numel);

// out (contiguous, numel elements, any float dtype the backend computes in) = the weight.
void nf4_dequantize(const Nf4Tensors& w, DType value_dtype, const Tensor& out);

// Host only: quantizes `values` (float32, contiguous, on the CPU: the weight's exact values
// in its source dtype) into `w` (host views of the right sizes), as bitsandbytes' CPU
// quantize_4bit and quantize_blockwise do. nested_code and code are written too (the
// tables above). A numel that is not a multiple of 64 is an error naming `name`.
// The offset is the absmax's mean summed in double and rounded once to float32, the same
// on every machine. bitsandbytes takes torch's float32 mean(), whose summation order
// depends on the device and its vector width (on an AVX-512 CPU it is 1 ulp off ours for
// one of the four fixture tensors); `offset` imposes one, to reproduce a file bit for bit.
void nf4_quantize(const Tensor& values, const Nf4Tensors& w, const char* name,
                  std::optional<float> offset = std::nullopt);

// Host only: out[j] (float32 [n / 64], host) = absmax'[j] of a whole weight's pieces `w`
// (host), computed as the dequantizers compute it, so a slice built from it dequantizes to
// the whole's bits.
void nf4_block_absmax(const Nf4Tensors& w, const Tensor& out);

using nf4_dequantize_fn = void (*)(const Nf4Tensors&, DType, const Tensor&);
FSDP_DECLARE_DISPATCH(nf4_dequantize_fn, nf4_dequantize_stub);

}  // namespace fsdp
