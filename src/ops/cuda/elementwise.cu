// CUDA whole-tensor kernels: add, scale_, fill_, cast, sum_squares (the CPU versions are
// src/ops/cpu/elementwise.cpp, the reference the tests hold these to). Contiguous inputs
// (the front end checks), so each is a grid-stride loop over a flat run, 16 bytes per
// access where the pointers are aligned (Note [Packed accesses] in common.cuh).
//
//   add / scale:  in the element type's accumulator (float, or double for float64),
//                 rounded once on store: the CPU's bits for every dtype.
//   fill:         stores a bit pattern, so every dtype is one kernel per element size.
//   cast:         any of float32 / float64 / bfloat16 / float16 to any: float widening is
//                 exact; narrowing rounds to nearest even (double -> 16-bit through
//                 round-to-odd float), the CPU cast's bits.
//   sum_squares:  each thread accumulates x^2 in double over a fixed stride, each block
//                 reduces its threads (common.cuh block_sum) into one partial, and a
//                 single block sums the partials. The grid depends only on n, so the
//                 association, hence the bits, are the same on every run and every GPU.
//                 It differs from the CPU's blocked order by rounding only (double sums).
#include "common.cuh"
#include "elementwise.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;
// Two blocks per SM of an H100 keep a bandwidth-bound reduction busy; more would only
// lengthen the second pass.
constexpr unsigned kMaxReduceBlocks = 264;

// add, scale, fill and cast move 16 bytes per access where the pointers allow (Note
// [Packed accesses] in common.cuh); W is the elements per pack.
template <typename T>
constexpr int kWidth = kPackBytes / int(sizeof(T));

template <typename T>
__global__ void add_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n,
                           bool packed) {
  using E = Elem<T>;
  constexpr int W = kWidth<T>;
  grid_stride_packed<W>(
      n, packed,
      [&](int64_t i) {
        const Pack<T, W> x = load_pack<T, W>(a + i), y = load_pack<T, W>(b + i);
        Pack<T, W> o;
        for (int j = 0; j < W; ++j) o.v[j] = E::store(E::load(x.v[j]) + E::load(y.v[j]));
        store_pack(out + i, o);
      },
      [&](int64_t i) { out[i] = E::store(E::load(a[i]) + E::load(b[i])); });
}

template <typename T>
__global__ void scale_kernel(T* __restrict__ x, typename Elem<T>::acc alpha, int64_t n, bool packed) {
  using E = Elem<T>;
  constexpr int W = kWidth<T>;
  grid_stride_packed<W>(
      n, packed,
      [&](int64_t i) {
        Pack<T, W> v = load_pack<T, W>(x + i);
        for (int j = 0; j < W; ++j) v.v[j] = E::store(E::load(v.v[j]) * alpha);
        store_pack(x + i, v);
      },
      [&](int64_t i) { x[i] = E::store(E::load(x[i]) * alpha); });
}

template <typename U>
__global__ void fill_kernel(U* __restrict__ x, U pattern, int64_t n, bool packed) {
  constexpr int W = kWidth<U>;
  Pack<U, W> p;
  for (int j = 0; j < W; ++j) p.v[j] = pattern;
  grid_stride_packed<W>(n, packed, [&](int64_t i) { store_pack(x + i, p); }, [&](int64_t i) { x[i] = pattern; });
}

// One conversion, exactly as the CPU's Convert<D>::from.
template <typename D, typename S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, double>) {
    return Elem<D>::from_double(v);
  } else if constexpr (std::is_same_v<D, double>) {
    return double(Elem<S>::load(v));
  } else {
    return Elem<D>::store(Elem<S>::load(v));  // via float: exact widening, one rounding
  }
}

// A cast's pack: as many elements as the wider type fits in 16 bytes (float -> bf16 reads
// 16 bytes and writes 8).
template <typename S, typename D>
constexpr int kCastWidth = kPackBytes / int(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));

template <typename S, typename D>
__global__ void cast_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n, bool packed) {
  constexpr int W = kCastWidth<S, D>;
  grid_stride_packed<W>(
      n, packed,
      [&](int64_t i) {
        const Pack<S, W> x = load_pack<S, W>(src + i);
        Pack<D, W> o;
        for (int j = 0; j < W; ++j) o.v[j] = convert<D>(x.v[j]);
        store_pack(dst + i, o);
      },
      [&](int64_t i) { dst[i] = convert<D>(src[i]); });
}

template <typename T>
__global__ void sum_squares_kernel(const T* __restrict__ x, int64_t n, double* __restrict__ partials) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(Elem<T>::load(x[i]));
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* __restrict__ partials, int count, double* __restrict__ out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int i = int(threadIdx.x); i < count; i += int(blockDim.x)) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

template <typename T>
void add_t(const void* a, const void* b, void* out, int64_t n, cudaStream_t s) {
  const bool packed = packs_fit(kPackBytes, a, b, out);
  FSDP_LAUNCH(add_kernel<T>, grid_for_packed(n, kWidth<T>, packed, kThreads), kThreads, 0, s, static_cast<const T*>(a),
              static_cast<const T*>(b), static_cast<T*>(out), n, packed);
}

template <typename T>
void scale_t(void* x, double alpha, int64_t n, cudaStream_t s) {
  using A = typename Elem<T>::acc;
  const bool packed = packs_fit(kPackBytes, x);
  FSDP_LAUNCH(scale_kernel<T>, grid_for_packed(n, kWidth<T>, packed, kThreads), kThreads, 0, s, static_cast<T*>(x),
              A(alpha), n, packed);
}

template <typename S, typename D>
void cast_t(const void* src, void* dst, int64_t n, cudaStream_t s) {
  constexpr int W = kCastWidth<S, D>;
  const bool packed = packs_fit(sizeof(S) * W, src) && packs_fit(sizeof(D) * W, dst);
  FSDP_LAUNCH((cast_kernel<S, D>), grid_for_packed(n, W, packed, kThreads), kThreads, 0, s, static_cast<const S*>(src),
              static_cast<D*>(dst), n, packed);
}

template <typename S>
void cast_from(const void* src, DType dst_t, void* dst, int64_t n, cudaStream_t s) {
  switch (dst_t) {
    case DType::F32: return cast_t<S, float>(src, dst, n, s);
    case DType::F64: return cast_t<S, double>(src, dst, n, s);
    case DType::BF16: return cast_t<S, bf16>(src, dst, n, s);
    case DType::F16: return cast_t<S, f16>(src, dst, n, s);
    default: return;
  }
}

template <typename T>
double sum_squares_t(const void* x, int64_t n, cudaStream_t s) {
  const unsigned blocks = grid_for(n, kThreads, kMaxReduceBlocks);
  double* partials = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), (blocks + 1) * sizeof(double), s));
  FSDP_LAUNCH(sum_squares_kernel<T>, blocks, kThreads, 0, s, static_cast<const T*>(x), n, partials);
  FSDP_LAUNCH(sum_partials_kernel, 1, kThreads, 0, s, partials, int(blocks), partials + blocks);
  double result = 0.0;
  FSDP_CUDA_CHECK(cudaMemcpyAsync(&result, partials + blocks, sizeof(double), cudaMemcpyDeviceToHost, s));
  FSDP_CUDA_CHECK(cudaFreeAsync(partials, s));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
  return result;
}

}  // namespace

bool elementwise_supports(DType t) { return is_floating(t); }

#define FSDP_FLOAT_SWITCH(t, F, ...)              \
  switch (t) {                                    \
    case DType::F32: return F<float>(__VA_ARGS__);  \
    case DType::F64: return F<double>(__VA_ARGS__); \
    case DType::BF16: return F<bf16>(__VA_ARGS__);  \
    case DType::F16: return F<f16>(__VA_ARGS__);    \
    default: break;                               \
  }

void launch_add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream) {
  FSDP_FLOAT_SWITCH(t, add_t, a, b, out, n, stream)
}

void launch_scale(DType t, void* x, double alpha, int64_t n, cudaStream_t stream) {
  FSDP_FLOAT_SWITCH(t, scale_t, x, alpha, n, stream)
}

template <typename U>
void fill_t(void* x, uint64_t pattern, int64_t n, cudaStream_t stream) {
  const bool packed = packs_fit(kPackBytes, x);
  FSDP_LAUNCH(fill_kernel<U>, grid_for_packed(n, kWidth<U>, packed, kThreads), kThreads, 0, stream, static_cast<U*>(x),
              U(pattern), n, packed);
}

void launch_fill(size_t element_size, void* x, uint64_t pattern, int64_t n, cudaStream_t stream) {
  switch (element_size) {
    case 1: return fill_t<uint8_t>(x, pattern, n, stream);
    case 2: return fill_t<uint16_t>(x, pattern, n, stream);
    case 4: return fill_t<uint32_t>(x, pattern, n, stream);
    case 8: return fill_t<uint64_t>(x, pattern, n, stream);
    default: return;
  }
}

void launch_cast(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, cudaStream_t stream) {
  FSDP_FLOAT_SWITCH(src_t, cast_from, src, dst_t, dst, n, stream)
}

double sum_squares(DType t, const void* x, int64_t n, cudaStream_t stream) {
  FSDP_FLOAT_SWITCH(t, sum_squares_t, x, n, stream)
  return 0.0;
}

#undef FSDP_FLOAT_SWITCH

}  // namespace fsdp::cuda
