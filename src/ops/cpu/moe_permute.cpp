// CPU token permutation for a mixture of experts: the plan is a serial counting sort
// (stable by construction: pairs are placed in increasing flat index), the row copies and
// sums run over independent output rows in parallel, each summed in double in a fixed
// order and rounded once. See moe_permute.h.
#include <cstdint>
#include <cstring>
#include <vector>

#include "unsupported.h"
#include "fsdp/ops/moe_permute.h"

namespace fsdp {
namespace {

constexpr int64_t kMinParallelWork = 1 << 14;

void plan_cpu(const Tensor& expert_t, int64_t num_experts, const Tensor& order_t, const Tensor& slot_t,
              const Tensor& offsets_t) {
  const int64_t pairs = expert_t.numel(), k = expert_t.size(1);
  const int32_t* expert = expert_t.data<int32_t>();
  int32_t* order = order_t.data<int32_t>();
  int32_t* slot = slot_t.data<int32_t>();
  int32_t* offsets = offsets_t.data<int32_t>();
  std::vector<int64_t> next(size_t(num_experts) + 1, 0);
  for (int64_t f = 0; f < pairs; ++f) {
    const int32_t e = expert[f];
    FSDP_CHECK(e >= 0 && e < num_experts, "moe_permute_plan: expert {} for token {} (choice {}) is outside [0, {})",
               e, f / k, f % k, num_experts);
    ++next[size_t(e) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) next[size_t(e) + 1] += next[size_t(e)];
  for (int64_t e = 0; e <= num_experts; ++e) offsets[e] = int32_t(next[size_t(e)]);
  for (int64_t f = 0; f < pairs; ++f) {
    const int64_t s = next[size_t(expert[f])]++;
    order[s] = int32_t(f);
    slot[f] = int32_t(s);
  }
}

template <typename T>
void gather_impl(const Tensor& x_t, const Tensor& order_t, int64_t k, const Tensor& xs_t) {
  const int64_t rows = xs_t.size(0), c = x_t.size(1), xst = x_t.stride(0), sst = xs_t.stride(0);
  const T* x = x_t.data<T>();
  const int32_t* order = order_t.data<int32_t>();
  T* xs = xs_t.data<T>();
#pragma omp parallel for schedule(static) if (rows * c >= kMinParallelWork)
  for (int64_t s = 0; s < rows; ++s) std::memcpy(xs + s * sst, x + (order[s] / k) * xst, size_t(c) * sizeof(T));
}

template <typename T>
void gather_backward_impl(const Tensor& dxs_t, const Tensor& slot_t, int64_t k, const Tensor& dx_t, bool accumulate) {
  const int64_t n = dx_t.size(0), c = dx_t.size(1), dst = dxs_t.stride(0), xst = dx_t.stride(0);
  const T* dxs = dxs_t.data<T>();
  const int32_t* slot = slot_t.data<int32_t>();
  T* dx = dx_t.data<T>();
#pragma omp parallel for schedule(static) if (n * k * c >= kMinParallelWork)
  for (int64_t t = 0; t < n; ++t) {
    T* row = dx + t * xst;
    for (int64_t i = 0; i < c; ++i) {
      double acc = accumulate ? double(row[i]) : 0.0;
      for (int64_t j = 0; j < k; ++j) acc += double(dxs[slot[t * k + j] * dst + i]);
      row[i] = T(acc);
    }
  }
}

template <typename T>
void combine_impl(const Tensor& ys_t, const Tensor& slot_t, const Tensor& w_t, const Tensor& res_t,
                  const Tensor& out_t) {
  const int64_t n = out_t.size(0), c = out_t.size(1), k = w_t.size(1), yst = ys_t.stride(0), ost = out_t.stride(0);
  const T* ys = ys_t.data<T>();
  const int32_t* slot = slot_t.data<int32_t>();
  const T* w = w_t.data<T>();  // the stat dtype is T itself for float32 and float64 data
  const T* res = res_t.defined() ? res_t.data<T>() : nullptr;
  const int64_t rst = res_t.defined() ? res_t.stride(0) : 0;
  T* out = out_t.data<T>();
#pragma omp parallel for schedule(static) if (n * k * c >= kMinParallelWork)
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < c; ++i) {
      double acc = res != nullptr ? double(res[t * rst + i]) : 0.0;
      for (int64_t j = 0; j < k; ++j) acc += double(w[t * k + j]) * double(ys[slot[t * k + j] * yst + i]);
      out[t * ost + i] = T(acc);
    }
  }
}

template <typename T>
void combine_backward_impl(const Tensor& dout_t, const Tensor& ys_t, const Tensor& slot_t, const Tensor& w_t,
                           const Tensor& dys_t, const Tensor& dw_t) {
  const int64_t n = dout_t.size(0), c = dout_t.size(1), k = w_t.size(1);
  const int64_t dst = dout_t.stride(0), yst = ys_t.stride(0), dyst = dys_t.stride(0);
  const T* dout = dout_t.data<T>();
  const T* ys = ys_t.data<T>();
  const int32_t* slot = slot_t.data<int32_t>();
  const T* w = w_t.data<T>();
  T* dys = dys_t.data<T>();
  T* dw = dw_t.data<T>();
#pragma omp parallel for schedule(static) if (n * k * c >= kMinParallelWork)
  for (int64_t t = 0; t < n; ++t) {
    const T* d = dout + t * dst;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = slot[t * k + j];
      const double wj = double(w[t * k + j]);
      double dot = 0;
      for (int64_t i = 0; i < c; ++i) {
        dys[s * dyst + i] = T(wj * double(d[i]));
        dot += double(d[i]) * double(ys[s * yst + i]);
      }
      dw[t * k + j] = T(dot);
    }
  }
}

void gather_cpu(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs) {
  switch (x.dtype()) {
    case DType::F32: return gather_impl<float>(x, order, k, xs);
    case DType::F64: return gather_impl<double>(x, order, k, xs);
    default: cpu::unsupported("moe_gather_rows", x.dtype());
  }
}

void gather_backward_cpu(const Tensor& dxs, const Tensor& slot, int64_t k, const Tensor& dx, bool accumulate) {
  switch (dx.dtype()) {
    case DType::F32: return gather_backward_impl<float>(dxs, slot, k, dx, accumulate);
    case DType::F64: return gather_backward_impl<double>(dxs, slot, k, dx, accumulate);
    default: cpu::unsupported("moe_gather_rows_backward", dx.dtype());
  }
}

void combine_cpu(const Tensor& ys, const Tensor& slot, const Tensor& w, const Tensor& res, const Tensor& out) {
  switch (out.dtype()) {
    case DType::F32: return combine_impl<float>(ys, slot, w, res, out);
    case DType::F64: return combine_impl<double>(ys, slot, w, res, out);
    default: cpu::unsupported("moe_combine", out.dtype());
  }
}

void combine_backward_cpu(const Tensor& dout, const Tensor& ys, const Tensor& slot, const Tensor& w, const Tensor& dys,
                          const Tensor& dw) {
  switch (dout.dtype()) {
    case DType::F32: return combine_backward_impl<float>(dout, ys, slot, w, dys, dw);
    case DType::F64: return combine_backward_impl<double>(dout, ys, slot, w, dys, dw);
    default: cpu::unsupported("moe_combine_backward", dout.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(moe_permute_plan_stub, DeviceType::CPU, &plan_cpu);
FSDP_REGISTER_DISPATCH(moe_gather_rows_stub, DeviceType::CPU, &gather_cpu);
FSDP_REGISTER_DISPATCH(moe_gather_rows_backward_stub, DeviceType::CPU, &gather_backward_cpu);
FSDP_REGISTER_DISPATCH(moe_combine_stub, DeviceType::CPU, &combine_cpu);
FSDP_REGISTER_DISPATCH(moe_combine_backward_stub, DeviceType::CPU, &combine_backward_cpu);

}  // namespace fsdp
