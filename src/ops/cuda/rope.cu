// Rotary position embedding, rotate-half convention (fsdp/ops/rope.h), the CPU's math
// (src/ops/cpu/rope.cpp): for pair i < D/2 of each head at position p = pos_offset + t
// (minus its document's start when a.doc_start is given),
//   c = cos[p, i], s = ±sin[p, i] (minus for the inverse, i.e. backward)
//   y[i] = x[i] * c - x[i+half] * s,   y[i+half] = x[i+half] * c + x[i] * s
// in the element type's arithmetic (float for float32, bfloat16 and float16, double for float64).
//
// Layout: a 2-D grid, x over the H * D/2 pairs of one token row, y over the B * T token
// rows (a grid-stride loop past 65535). One thread owns one pair: it reads both inputs
// before writing both outputs, so y may alias x.
#include "common.cuh"
#include "rope.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void rope_kernel(RopeArgs a) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t half = a.D / 2, pairs = a.H * half;
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= pairs) return;
  const int64_t h = k / half, i = k % half;
  const A sign = a.inverse ? A(-1) : A(1);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  for (int64_t row = blockIdx.y; row < a.B * a.T; row += gridDim.y) {
    const int64_t b = row / a.T, t = row % a.T;
    const int64_t p = a.pos_offset + t - (a.doc_start != nullptr ? a.doc_start[row] : 0);
    const A c = A(a.cos[p * half + i]), s = sign * A(a.sin[p * half + i]);
    const T* xr = x + b * a.xs0 + t * a.xs1 + h * a.D;
    T* yr = y + b * a.ys0 + t * a.ys1 + h * a.D;
    const A x0 = E::load(xr[i]), x1 = E::load(xr[i + half]);
    yr[i] = E::store(x0 * c - x1 * s);
    yr[i + half] = E::store(x1 * c + x0 * s);
  }
}

template <typename T>
void rope_t(const RopeArgs& a, cudaStream_t s) {
  const int64_t rows = a.B * a.T;
  const dim3 grid(blocks_for(a.H * (a.D / 2), kThreads), unsigned(rows < 65535 ? rows : 65535));
  FSDP_LAUNCH(rope_kernel<T>, grid, kThreads, 0, s, a);
}

}  // namespace

bool rope_supports(DType t) { return is_floating(t); }

void launch_rope(DType t, const RopeArgs& a, cudaStream_t stream) {
  if (t == DType::F32) return rope_t<float>(a, stream);
  if (t == DType::F64) return rope_t<double>(a, stream);
  if (t == DType::BF16) return rope_t<bf16>(a, stream);
  if (t == DType::F16) return rope_t<f16>(a, stream);
}

}  // namespace fsdp::cuda
