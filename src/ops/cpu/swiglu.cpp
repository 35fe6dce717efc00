// CPU SwiGLU gate, forward and backward side by side.
//
//   s = sigmoid(g) = 1 / (1 + exp(-g)),  silu(g) = g * s
//   forward:  out  = silu(g) * u
//   backward: dg   = dout * u * s * (1 + g * (1 - s))     (d silu / dg = s + g s (1 - s))
//             du   = dout * silu(g)
//
// Layout: every tensor [N, F] with packed rows and its own row stride (gate and up are
// usually the two column halves of one [N, 2F] GEMM output). Each element's inputs are
// read before its outputs are written, so dgate may alias gate and dup may alias up
// (backward can write its gradients over the fused buffer in place).
//
// For g below about -88 (float) exp(-g) overflows to inf and s becomes 0, which is the
// correct limit; no NaN appears for finite inputs.
#include <cmath>
#include <cstdint>

#include "unsupported.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelWork = 1 << 15;

template <typename T>
inline T sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

template <typename T>
void forward_impl(const Tensor& gate_t, const Tensor& up_t, const Tensor& out_t) {
  const int64_t n = gate_t.size(0), f = gate_t.size(1);
  const int64_t gs = gate_t.stride(0), us = up_t.stride(0), os = out_t.stride(0);
  const T* gate = gate_t.data<T>();
  const T* up = up_t.data<T>();
  T* out = out_t.data<T>();
#pragma omp parallel for schedule(static) if (n * f >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T* gr = gate + i * gs;
    const T* ur = up + i * us;
    T* orow = out + i * os;
    for (int64_t j = 0; j < f; ++j) {
      const T g = gr[j];
      orow[j] = g * sigmoid(g) * ur[j];
    }
  }
}

template <typename T>
void backward_impl(const Tensor& dout_t, const Tensor& gate_t, const Tensor& up_t, const Tensor& dgate_t,
                   const Tensor& dup_t) {
  const int64_t n = gate_t.size(0), f = gate_t.size(1);
  const int64_t ds = dout_t.stride(0), gs = gate_t.stride(0), us = up_t.stride(0);
  const int64_t dgs = dgate_t.stride(0), dus = dup_t.stride(0);
  const T* dout = dout_t.data<T>();
  const T* gate = gate_t.data<T>();
  const T* up = up_t.data<T>();
  T* dgate = dgate_t.data<T>();
  T* dup = dup_t.data<T>();
#pragma omp parallel for schedule(static) if (n * f >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T* dr = dout + i * ds;
    const T* gr = gate + i * gs;
    const T* ur = up + i * us;
    T* dgr = dgate + i * dgs;
    T* dur = dup + i * dus;
    for (int64_t j = 0; j < f; ++j) {
      const T d = dr[j], g = gr[j], u = ur[j];
      const T s = sigmoid(g);
      dgr[j] = d * u * s * (T(1) + g * (T(1) - s));
      dur[j] = d * g * s;
    }
  }
}

void swiglu_forward_cpu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  switch (gate.dtype()) {
    case DType::F32: return forward_impl<float>(gate, up, out);
    case DType::F64: return forward_impl<double>(gate, up, out);
    default: cpu::unsupported("swiglu_forward", gate.dtype());
  }
}

void swiglu_backward_cpu(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                         const Tensor& dup) {
  switch (gate.dtype()) {
    case DType::F32: return backward_impl<float>(dout, gate, up, dgate, dup);
    case DType::F64: return backward_impl<double>(dout, gate, up, dgate, dup);
    default: cpu::unsupported("swiglu_backward", gate.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(swiglu_forward_stub, DeviceType::CPU, &swiglu_forward_cpu);
FSDP_REGISTER_DISPATCH(swiglu_backward_stub, DeviceType::CPU, &swiglu_backward_cpu);

}  // namespace fsdp
