// Front end of NF4 dequantization (fsdp/ops/nf4.h): the two tables, the piece sizes, and
// the argument checks every backend relies on; quantization (host only) is in
// src/ops/cpu/nf4.cpp beside the CPU dequantizer.
#include "fsdp/ops/nf4.h"

#include <span>

#include "nf4_checks.h"
#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(nf4_dequantize_stub);

// bitsandbytes/functional.py get_4bit_type("nf4"): the quantiles of N(0, 1) normalised to
// [-1, 1] with an exact zero (QLoRA, appendix E), as float32.
const float kNf4Code[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};

// bitsandbytes' create_dynamic_map(signed=True): 8-bit dynamic quantization's 256 values
// (7 exponent bits of powers of ten, sorted ascending), as the CPU's quantize_blockwise
// uses and saves it: that kernel first sets entry 0 (-0.99296875) to exactly -1.0, so a
// checkpoint quantized on a CPU stores this table as its nested_quant_map. The values come
// from torch.linspace in float32, whose vectorised rounding is not worth re-deriving:
// tests/golden/nf4 holds this table to bitsandbytes' bit for bit.
const float kNf4DynamicMap[256] = {
    -0x1.0p+0f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.0p+0f,
};

int64_t nf4_packed_bytes(int64_t numel) { return numel / 2; }
int64_t nf4_blocks(int64_t numel) { return numel / kNf4BlockSize; }
int64_t nf4_nested_blocks(int64_t numel) { return (nf4_blocks(numel) + kNf4NestedBlockSize - 1) / kNf4NestedBlockSize; }

namespace detail {

// Each piece present, contiguous, of its dtype and size, on out's device.
void check_nf4_pieces(const Nf4Tensors& w, int64_t numel, Device device) {
  struct Piece {
    const Tensor& t;
    const char* what;
    DType dtype;
    int64_t numel;
  };
  const Piece whole[] = {{w.packed, "packed", DType::U8, nf4_packed_bytes(numel)},
                         {w.absmax, "absmax", DType::U8, nf4_blocks(numel)},
                         {w.nested_absmax, "nested_absmax", DType::F32, nf4_nested_blocks(numel)},
                         {w.nested_code, "nested_code", DType::F32, 256},
                         {w.offset, "offset", DType::F32, 1},
                         {w.code, "code", DType::F32, 16}};
  const Piece slice[] = {{w.packed, "packed", DType::U8, nf4_packed_bytes(numel)},
                         {w.block_absmax, "block_absmax", DType::F32, nf4_blocks(numel)},
                         {w.code, "code", DType::F32, 16}};
  for (const Piece& p : w.sliced() ? std::span<const Piece>(slice) : std::span<const Piece>(whole)) {
    check_defined(p.t, p.what);
    check_dtype(p.t, p.dtype, p.what);
    check_contiguous(p.t, p.what);
    FSDP_CHECK(p.t.numel() == p.numel, "nf4: {} holds {} elements, a weight of {} needs {}", p.what, p.t.numel(),
               numel, p.numel);
    FSDP_CHECK(p.t.device() == device, "nf4: {} is on {}, the output on {}", p.what, p.t.device().str(),
               device.str());
  }
}

}  // namespace detail

void nf4_dequantize(const Nf4Tensors& w, DType value_dtype, const Tensor& out) {
  check_defined(out, "out");
  detail::check_floating(out, "out", "nf4_dequantize");
  check_contiguous(out, "out");
  FSDP_CHECK(out.numel() % kNf4BlockSize == 0, "nf4_dequantize: a weight of {} elements is not a multiple of the "
             "block size {}", out.numel(), kNf4BlockSize);
  FSDP_CHECK(value_dtype == DType::F32 || value_dtype == DType::BF16 || value_dtype == DType::F16,
             "nf4_dequantize: the weight's dtype must be float32, bfloat16 or float16, got {}",
             dtype_name(value_dtype));
  detail::check_nf4_pieces(w, out.numel(), out.device());
  if (out.numel() == 0) return;
  nf4_dequantize_stub(out.device(), w, value_dtype, out);
}

}  // namespace fsdp
