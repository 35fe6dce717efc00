// Token permutation for a mixture of experts on the GPU, the CPU's math
// (src/ops/cpu/moe_permute.cpp; see fsdp/ops/moe_permute.h).
//
// The plan is a stable counting sort in one block: thread i owns a contiguous chunk of the
// (token, choice) pairs; for each expert in turn every thread counts its chunk's pairs,
// an exclusive scan over the threads (in thread order) gives each chunk its first
// position, and each thread writes its pairs in increasing order. Integer work only, the
// order fixed by the shapes: the same result on every run, stable by construction. Its
// cost is (E + 1) passes over the pairs spread over the block, microseconds at Mixtral's
// E = 8 and a few thousand tokens.
//
// Gathers and combines: one block per output row, threads over the features; each output
// element has one writer and sums its k terms in choice order in float (double for
// float64). combine_backward's dweight is a block reduction per (token, choice) in a
// fixed tree. No atomics anywhere.
#include "common.cuh"
#include "moe_permute.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kPlanThreads = 256;
constexpr int kRowThreads = 128;

__global__ void plan_kernel(const int32_t* expert, int64_t pairs, int64_t e, int32_t* order, int32_t* slot,
                            int32_t* offsets) {
  __shared__ int64_t base[kPlanThreads];
  __shared__ int64_t running;
  const int64_t tid = threadIdx.x;
  const int64_t chunk = (pairs + kPlanThreads - 1) / kPlanThreads;
  const int64_t begin = tid * chunk < pairs ? tid * chunk : pairs;
  const int64_t end = begin + chunk < pairs ? begin + chunk : pairs;
  if (tid == 0) running = 0;
  __syncthreads();
  for (int64_t x = 0; x < e; ++x) {
    int64_t mine = 0;
    for (int64_t f = begin; f < end; ++f) mine += expert[f] == int32_t(x) ? 1 : 0;
    base[tid] = mine;
    __syncthreads();
    if (tid == 0) {  // exclusive scan in thread order, after the experts before x
      offsets[x] = int32_t(running);
      int64_t sum = running;
      for (int i = 0; i < kPlanThreads; ++i) {
        const int64_t c = base[i];
        base[i] = sum;
        sum += c;
      }
      running = sum;
    }
    __syncthreads();
    int64_t s = base[tid];
    for (int64_t f = begin; f < end; ++f) {
      if (expert[f] != int32_t(x)) continue;
      order[s] = int32_t(f);
      slot[f] = int32_t(s);
      ++s;
    }
    __syncthreads();  // base[] is rewritten by the next expert's pass
  }
  if (tid == 0) offsets[e] = int32_t(running);
}

template <typename T>
__global__ void gather_kernel(RowsView x, const int32_t* order, int64_t k, RowsView xs, int64_t c) {
  const int64_t s = blockIdx.x;
  const T* src = static_cast<const T*>(x.data) + (order[s] / k) * x.stride;
  T* dst = static_cast<T*>(xs.data) + s * xs.stride;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) dst[i] = src[i];
}

template <typename T>
__global__ void gather_bwd_kernel(RowsView dxs, const int32_t* slot, int64_t k, RowsView dx, int64_t c,
                                  bool accumulate) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t t = blockIdx.x;
  T* row = static_cast<T*>(dx.data) + t * dx.stride;
  const T* src = static_cast<const T*>(dxs.data);
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    A acc = accumulate ? E::load(row[i]) : A(0);
    for (int64_t j = 0; j < k; ++j) acc += E::load(src[int64_t(slot[t * k + j]) * dxs.stride + i]);
    row[i] = E::store(acc);
  }
}

// The weight as the data type holds it (transformers casts the routing weights to the
// hidden dtype before multiplying), back in the compute type.
template <typename T, typename S>
__device__ __forceinline__ typename Elem<T>::acc rounded_weight(S w) {
  using E = Elem<T>;
  return E::load(E::store(typename E::acc(w)));
}

template <typename T, typename S>
__global__ void combine_kernel(RowsView ys, const int32_t* slot, const S* weight, const T* residual, int64_t rs,
                               RowsView out, int64_t k, int64_t c) {
  using E = Elem<T>;
  using A = typename E::acc;
  const int64_t t = blockIdx.x;
  const T* y = static_cast<const T*>(ys.data);
  T* o = static_cast<T*>(out.data) + t * out.stride;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    A acc = residual != nullptr ? E::load(residual[t * rs + i]) : A(0);
    for (int64_t j = 0; j < k; ++j)
      acc += rounded_weight<T>(weight[t * k + j]) * E::load(y[int64_t(slot[t * k + j]) * ys.stride + i]);
    o[i] = E::store(acc);
  }
}

template <typename T, typename S>
__global__ void combine_bwd_kernel(RowsView dout, RowsView ys, const int32_t* slot, const S* weight, RowsView dys,
                                   S* dweight, int64_t k, int64_t c) {
  using E = Elem<T>;
  using A = typename E::acc;
  __shared__ A scratch[32];
  const int64_t t = blockIdx.x;
  const T* d = static_cast<const T*>(dout.data) + t * dout.stride;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t s = slot[t * k + j];
    const A w = rounded_weight<T>(weight[t * k + j]);
    const T* y = static_cast<const T*>(ys.data) + s * ys.stride;
    T* dy = static_cast<T*>(dys.data) + s * dys.stride;
    A dot = 0;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const A di = E::load(d[i]);
      dy[i] = E::store(w * di);
      dot += di * E::load(y[i]);
    }
    const A total = block_sum(dot, scratch);
    if (threadIdx.x == 0) dweight[t * k + j] = S(total);
    __syncthreads();  // scratch is reused by the next choice
  }
}

}  // namespace

bool moe_permute_supports(DType t) { return is_floating(t); }

void launch_moe_permute_plan(const int32_t* expert, int64_t pairs, int64_t e, int32_t* order, int32_t* slot,
                             int32_t* offsets, cudaStream_t stream) {
  FSDP_LAUNCH(plan_kernel, 1, kPlanThreads, 0, stream, expert, pairs, e, order, slot, offsets);
}

void launch_moe_gather_rows(DType t, RowsView x, const int32_t* order, int64_t k, RowsView xs, int64_t rows,
                            int64_t c, cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    FSDP_LAUNCH((gather_kernel<T>), unsigned(rows), kRowThreads, 0, stream, x, order, k, xs, c);
  });
}

void launch_moe_gather_rows_backward(DType t, RowsView dxs, const int32_t* slot, int64_t k, RowsView dx, int64_t n,
                                     int64_t c, bool accumulate, cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    FSDP_LAUNCH((gather_bwd_kernel<T>), unsigned(n), kRowThreads, 0, stream, dxs, slot, k, dx, c, accumulate);
  });
}

void launch_moe_combine(DType t, RowsView ys, const int32_t* slot, const void* weight, const void* residual,
                        int64_t rs, RowsView out, int64_t n, int64_t k, int64_t c, cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    FSDP_LAUNCH((combine_kernel<T, S>), unsigned(n), kRowThreads, 0, stream, ys, slot, static_cast<const S*>(weight),
                static_cast<const T*>(residual), rs, out, k, c);
  });
}

void launch_moe_combine_backward(DType t, RowsView dout, RowsView ys, const int32_t* slot, const void* weight,
                                 RowsView dys, void* dweight, int64_t n, int64_t k, int64_t c, cudaStream_t stream) {
  with_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    using S = Stat<T>;
    FSDP_LAUNCH((combine_bwd_kernel<T, S>), unsigned(n), kRowThreads, 0, stream, dout, ys, slot,
                static_cast<const S*>(weight), dys, static_cast<S*>(dweight), k, c);
  });
}

}  // namespace fsdp::cuda
