// Fused AdamW over one contiguous run of parameters (a flat FSDP shard): one pass reads
// param, grad, exp_avg, exp_avg_sq and writes the three states, the memory-bound minimum
// of 7 accesses per element. The math is src/ops/cpu/adamw.cpp's, term for term:
//
//   g  = grad * grad_scale
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p  = p * (1 - lr * wd) - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
//
// with the per-step scalars formed in double on the host and rounded to T once, as
// PyTorch forms them; the element loop is pure T arithmetic. (nvcc may fuse a multiply
// and an add into an FMA, so a GPU result can differ from the CPU's in the last bit; the
// emulation build, compiled without contraction, gives the CPU's bits.)
#include "adamw.cuh"
#include "common.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ grad, T* __restrict__ m, T* __restrict__ v,
                             int64_t n, T decay, T step_size, T bc2_sqrt, T b1, T one_minus_b1, T b2, T one_minus_b2,
                             T eps, T gs) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + one_minus_b1 * g;
    const T vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
  }
}

template <typename T>
void adamw_t(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, const AdamWScalars& s,
             cudaStream_t stream) {
  FSDP_LAUNCH(adamw_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, static_cast<T*>(param),
              static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n, T(s.decay),
              T(s.step_size), T(s.bc2_sqrt), T(s.beta1), T(1.0 - s.beta1), T(s.beta2), T(1.0 - s.beta2), T(s.eps),
              T(s.grad_scale));
}

}  // namespace

void launch_adamw(DType t, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream) {
  if (t == DType::F32) return adamw_t<float>(param, grad, exp_avg, exp_avg_sq, n, s, stream);
  if (t == DType::F64) return adamw_t<double>(param, grad, exp_avg, exp_avg_sq, n, s, stream);
}

}  // namespace fsdp::cuda
