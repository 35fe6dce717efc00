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
__device__ __forceinline__ void adamw_element(T& p, T g, T& m, T& v, T decay, T step_size, T bc2_sqrt, T b1,
                                              T one_minus_b1, T b2, T one_minus_b2, T eps, T gs) {
  g = g * gs;
  const T mi = b1 * m + one_minus_b1 * g;
  const T vi = b2 * v + one_minus_b2 * g * g;
  m = mi;
  v = vi;
  p = p * decay - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
}

// 16 bytes per access of each of the four arrays where they are aligned (Note [Packed
// accesses] in common.cuh): the update is bandwidth-bound.
template <typename T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ grad, T* __restrict__ m, T* __restrict__ v,
                             int64_t n, bool packed, T decay, T step_size, T bc2_sqrt, T b1, T one_minus_b1, T b2,
                             T one_minus_b2, T eps, T gs) {
  constexpr int W = kPackBytes / int(sizeof(T));
  grid_stride_packed<W>(
      n, packed,
      [&](int64_t i) {
        Pack<T, W> pp = load_pack<T, W>(p + i), mp = load_pack<T, W>(m + i), vp = load_pack<T, W>(v + i);
        const Pack<T, W> gp = load_pack<T, W>(grad + i);
        for (int j = 0; j < W; ++j)
          adamw_element(pp.v[j], gp.v[j], mp.v[j], vp.v[j], decay, step_size, bc2_sqrt, b1, one_minus_b1, b2,
                        one_minus_b2, eps, gs);
        store_pack(m + i, mp);
        store_pack(v + i, vp);
        store_pack(p + i, pp);
      },
      [&](int64_t i) {
        adamw_element(p[i], grad[i], m[i], v[i], decay, step_size, bc2_sqrt, b1, one_minus_b1, b2, one_minus_b2, eps,
                      gs);
      });
}

template <typename T>
void adamw_t(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, const AdamWScalars& s,
             cudaStream_t stream) {
  constexpr int W = kPackBytes / int(sizeof(T));
  const bool packed = packs_fit(kPackBytes, param, grad, exp_avg, exp_avg_sq);
  FSDP_LAUNCH(adamw_kernel<T>, grid_for_packed(n, W, packed, kThreads), kThreads, 0, stream,
              static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
              static_cast<T*>(exp_avg_sq), n, packed, T(s.decay), T(s.step_size), T(s.bc2_sqrt), T(s.beta1),
              T(1.0 - s.beta1), T(s.beta2), T(1.0 - s.beta2), T(s.eps), T(s.grad_scale));
}

}  // namespace

void launch_adamw(DType t, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream) {
  if (t == DType::F32) return adamw_t<float>(param, grad, exp_avg, exp_avg_sq, n, s, stream);
  if (t == DType::F64) return adamw_t<double>(param, grad, exp_avg, exp_avg_sq, n, s, stream);
}

}  // namespace fsdp::cuda
