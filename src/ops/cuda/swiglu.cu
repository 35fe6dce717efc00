// The SwiGLU gate of Llama's MLP, forward and backward, the CPU's math
// (src/ops/cpu/swiglu.cpp):
//   s = sigmoid(g) = 1 / (1 + exp(-g)),  silu(g) = g * s
//   forward:  out = silu(g) * u
//   backward: dg  = dout * u * s * (1 + g * (1 - s)),  du = dout * silu(g)
// in float (double for float64; bfloat16 and float16 converted at load and store).
//
// Layout: a 2-D grid, x over the f columns, y over rows (grid-stride past 65535). Each
// thread reads an element's inputs before writing its outputs, so dgate may alias gate
// and dup may alias up, as on the CPU.
#include "common.cuh"
#include "swiglu.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

template <typename A>
__device__ __forceinline__ A sigmoid(A g) {
  return A(1) / (A(1) + exp_of(-g));
}

template <typename T>
__global__ void swiglu_fwd_kernel(RowsView gate, RowsView up, RowsView out, int64_t n, int64_t f) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= f) return;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const A g = E::load(static_cast<const T*>(gate.data)[i * gate.stride + j]);
    const A u = E::load(static_cast<const T*>(up.data)[i * up.stride + j]);
    static_cast<T*>(out.data)[i * out.stride + j] = E::store(g * sigmoid(g) * u);
  }
}

template <typename T>
__global__ void swiglu_bwd_kernel(RowsView dout, RowsView gate, RowsView up, RowsView dgate, RowsView dup, int64_t n,
                                  int64_t f) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= f) return;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const A d = E::load(static_cast<const T*>(dout.data)[i * dout.stride + j]);
    const A g = E::load(static_cast<const T*>(gate.data)[i * gate.stride + j]);
    const A u = E::load(static_cast<const T*>(up.data)[i * up.stride + j]);
    const A s = sigmoid(g);
    static_cast<T*>(dgate.data)[i * dgate.stride + j] = E::store(d * u * s * (A(1) + g * (A(1) - s)));
    static_cast<T*>(dup.data)[i * dup.stride + j] = E::store(d * g * s);
  }
}

dim3 grid_2d(int64_t n, int64_t f) { return dim3(blocks_for(f, kThreads), unsigned(n < 65535 ? n : 65535)); }

template <typename T>
void forward_t(RowsView gate, RowsView up, RowsView out, int64_t n, int64_t f, cudaStream_t s) {
  FSDP_LAUNCH(swiglu_fwd_kernel<T>, grid_2d(n, f), kThreads, 0, s, gate, up, out, n, f);
}

template <typename T>
void backward_t(RowsView dout, RowsView gate, RowsView up, RowsView dgate, RowsView dup, int64_t n, int64_t f,
                cudaStream_t s) {
  FSDP_LAUNCH(swiglu_bwd_kernel<T>, grid_2d(n, f), kThreads, 0, s, dout, gate, up, dgate, dup, n, f);
}

}  // namespace

bool swiglu_supports(DType t) { return is_floating(t); }

void launch_swiglu_forward(DType t, RowsView gate, RowsView up, RowsView out, int64_t n, int64_t f,
                           cudaStream_t stream) {
  if (t == DType::F32) return forward_t<float>(gate, up, out, n, f, stream);
  if (t == DType::F64) return forward_t<double>(gate, up, out, n, f, stream);
  if (t == DType::BF16) return forward_t<bf16>(gate, up, out, n, f, stream);
  if (t == DType::F16) return forward_t<f16>(gate, up, out, n, f, stream);
}

void launch_swiglu_backward(DType t, RowsView dout, RowsView gate, RowsView up, RowsView dgate, RowsView dup,
                            int64_t n, int64_t f, cudaStream_t stream) {
  if (t == DType::F32) return backward_t<float>(dout, gate, up, dgate, dup, n, f, stream);
  if (t == DType::F64) return backward_t<double>(dout, gate, up, dgate, dup, n, f, stream);
  if (t == DType::BF16) return backward_t<bf16>(dout, gate, up, dgate, dup, n, f, stream);
  if (t == DType::F16) return backward_t<f16>(dout, gate, up, dgate, dup, n, f, stream);
}

}  // namespace fsdp::cuda
