// NF4 dequantization on the GPU, the CPU's math (src/ops/cpu/nf4.cpp, fsdp/ops/nf4.h):
//   absmax' = nested_code[absmax_q[j]] * nested_absmax[j / 256] + offset
//   w'      = round_to(value_dtype, code[q] * absmax')          then stored in out's dtype
// Each product and sum is a separate round-to-nearest float operation (__fmul_rn /
// __fadd_rn: nvcc would otherwise contract the absmax line into one FMA, which rounds once
// and gives other bits than bitsandbytes' two kernels and the CPU).
//
// A tensor-parallel slice stores each block's absmax' as a float (fsdp/ops/nf4.h), read
// in place of the first line.
//
// Layout: one thread per packed byte (two weights), a grid-stride loop over the n / 2
// bytes. Each thread recomputes its block's absmax (two loads from tables a few KB in
// size, shared through L1 by the 32 threads of a block); the kernel moves 0.5 byte in and
// sizeof(out) * 1 byte out per weight, so it is bound by the output's writes.
#include "common.cuh"
#include "nf4.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBlockSize = 64, kNestedBlockSize = 256;

__device__ __forceinline__ float round_to(DType value_dtype, float v) {
  if (value_dtype == DType::BF16) return bf16_bits_to_float(float_to_bf16_bits(v));
  if (value_dtype == DType::F16) return f16_bits_to_float(float_to_f16_bits(v));
  return v;
}

template <typename T>
__global__ void nf4_dequantize_kernel(Nf4View w, DType value_dtype, T* out, int64_t bytes) {
  using E = Elem<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; m < bytes; m += stride) {
    const int64_t j = m / (kBlockSize / 2);
    float absmax;
    if (w.block_absmax != nullptr) {
      absmax = w.block_absmax[j];  // a slice: the whole's absmax', computed so on the host
    } else {
      const float scaled = __fmul_rn(w.nested_code[w.absmax[j]], w.nested_absmax[j / kNestedBlockSize]);
      absmax = __fadd_rn(scaled, w.offset[0]);
    }
    const uint8_t b = w.packed[m];
    out[2 * m] = E::store(round_to(value_dtype, __fmul_rn(w.code[b >> 4], absmax)));
    out[2 * m + 1] = E::store(round_to(value_dtype, __fmul_rn(w.code[b & 0x0f], absmax)));
  }
}

template <typename T>
void dequantize_t(DType value_dtype, const Nf4View& w, void* out, int64_t numel, cudaStream_t s) {
  const int64_t bytes = numel / 2;
  FSDP_LAUNCH(nf4_dequantize_kernel<T>, grid_for(bytes, kThreads), kThreads, 0, s, w, value_dtype,
              static_cast<T*>(out), bytes);
}

}  // namespace

bool nf4_dequantize_supports(DType t) { return is_floating(t); }

void launch_nf4_dequantize(DType out_dtype, DType value_dtype, const Nf4View& w, void* out, int64_t numel,
                           cudaStream_t stream) {
  with_element_type(out_dtype, [&](auto e) { dequantize_t<decltype(e)>(value_dtype, w, out, numel, stream); });
}

}  // namespace fsdp::cuda
