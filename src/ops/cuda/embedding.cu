// Token embedding, forward and backward (fsdp/ops/embedding.h; the CPU's is
// src/ops/cpu/embedding.cpp):
//   forward:  out[n, :] = table[ids[n], :]              (a row gather, 2-D grid)
//   backward: dtable[ids[n], :] += dout[n, :]
//
// Backward without atomics and in the CPU's order: one thread per column walks the rows
// n = 0..N-1 and adds into dtable[ids[n], c]. Each dtable element is updated by one thread
// only, in increasing n, so repeated ids cannot race and the bits equal the CPU's. The
// price is C-way parallelism with an N-long loop; a sort-by-id kernel is the faster
// deterministic design when this shows up in a profile.
//
// Ids are validated first (find_bad_id: a flag kernel and a read-back), so an id out of
// range is the CPU's error, with position and id, and no output is touched. That read-back
// synchronises the host once per call (TODO issue 7: report it through a device-side flag
// checked at the step's loss read-back instead).
#include "common.cuh"
#include "embedding.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

template <typename I>
__global__ void find_bad_id_kernel(const I* __restrict__ ids, int64_t n, int64_t vocab,
                                   unsigned long long* __restrict__ first_bad) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(ids[i]);
    if (id < 0 || id >= vocab) atomicMin(first_bad, (unsigned long long)i);
  }
}

template <typename T, typename I>
__global__ void embedding_fwd_kernel(const I* __restrict__ ids, RowsView table, RowsView out, int64_t n, int64_t c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const T* tp = static_cast<const T*>(table.data);
  T* op = static_cast<T*>(out.data);
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) op[i * out.stride + j] = tp[int64_t(ids[i]) * table.stride + j];
}

template <typename T, typename I>
__global__ void embedding_bwd_kernel(const I* __restrict__ ids, RowsView dout, RowsView dtable, int64_t n, int64_t c) {
  using E = Elem<T>;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const T* dp = static_cast<const T*>(dout.data);
  T* tp = static_cast<T*>(dtable.data);
  for (int64_t i = 0; i < n; ++i) {
    T* dst = tp + int64_t(ids[i]) * dtable.stride + j;
    *dst = E::store(E::load(*dst) + E::load(dp[i * dout.stride + j]));
  }
}

template <typename I>
BadId find_bad_t(const void* ids, int64_t n, int64_t vocab, cudaStream_t s) {
  unsigned long long* flag = nullptr;
  FSDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(unsigned long long), s));
  FSDP_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), s));
  FSDP_LAUNCH(find_bad_id_kernel<I>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const I*>(ids), n, vocab, flag);
  unsigned long long pos = 0;
  FSDP_CUDA_CHECK(cudaMemcpyAsync(&pos, flag, sizeof(pos), cudaMemcpyDeviceToHost, s));
  FSDP_CUDA_CHECK(cudaFreeAsync(flag, s));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
  if (pos == ~0ull) return BadId{-1, 0};
  I id = 0;
  FSDP_CUDA_CHECK(cudaMemcpyAsync(&id, static_cast<const I*>(ids) + pos, sizeof(I), cudaMemcpyDeviceToHost, s));
  FSDP_CUDA_CHECK(cudaStreamSynchronize(s));
  return BadId{int64_t(pos), int64_t(id)};
}

dim3 grid_2d(int64_t n, int64_t c) { return dim3(blocks_for(c, kThreads), unsigned(n < 65535 ? n : 65535)); }

template <typename T, typename I>
void forward_t(const void* ids, RowsView table, RowsView out, int64_t n, int64_t c, cudaStream_t s) {
  FSDP_LAUNCH((embedding_fwd_kernel<T, I>), grid_2d(n, c), kThreads, 0, s, static_cast<const I*>(ids), table, out, n,
              c);
}

template <typename T, typename I>
void backward_t(const void* ids, RowsView dout, RowsView dtable, int64_t n, int64_t c, cudaStream_t s) {
  FSDP_LAUNCH((embedding_bwd_kernel<T, I>), blocks_for(c, kThreads), kThreads, 0, s, static_cast<const I*>(ids), dout,
              dtable, n, c);
}

template <typename T>
void forward_ids(DType id_t, const void* ids, RowsView table, RowsView out, int64_t n, int64_t c, cudaStream_t s) {
  if (id_t == DType::I64) return forward_t<T, int64_t>(ids, table, out, n, c, s);
  return forward_t<T, int32_t>(ids, table, out, n, c, s);
}

template <typename T>
void backward_ids(DType id_t, const void* ids, RowsView dout, RowsView dtable, int64_t n, int64_t c, cudaStream_t s) {
  if (id_t == DType::I64) return backward_t<T, int64_t>(ids, dout, dtable, n, c, s);
  return backward_t<T, int32_t>(ids, dout, dtable, n, c, s);
}

}  // namespace

bool embedding_supports(DType t) { return is_floating(t); }

BadId find_bad_id(DType id_t, const void* ids, int64_t n, int64_t vocab, cudaStream_t stream) {
  if (id_t == DType::I64) return find_bad_t<int64_t>(ids, n, vocab, stream);
  return find_bad_t<int32_t>(ids, n, vocab, stream);
}

void launch_embedding_forward(DType t, DType id_t, const void* ids, RowsView table, RowsView out, int64_t n, int64_t c,
                              cudaStream_t stream) {
  if (t == DType::F32) return forward_ids<float>(id_t, ids, table, out, n, c, stream);
  if (t == DType::F64) return forward_ids<double>(id_t, ids, table, out, n, c, stream);
  if (t == DType::BF16) return forward_ids<bf16>(id_t, ids, table, out, n, c, stream);
  if (t == DType::F16) return forward_ids<f16>(id_t, ids, table, out, n, c, stream);
}

void launch_embedding_backward(DType t, DType id_t, const void* ids, RowsView dout, RowsView dtable, int64_t n,
                               int64_t c, cudaStream_t stream) {
  if (t == DType::F32) return backward_ids<float>(id_t, ids, dout, dtable, n, c, stream);
  if (t == DType::F64) return backward_ids<double>(id_t, ids, dout, dtable, n, c, stream);
  if (t == DType::BF16) return backward_ids<bf16>(id_t, ids, dout, dtable, n, c, stream);
  if (t == DType::F16) return backward_ids<f16>(id_t, ids, dout, dtable, n, c, stream);
}

}  // namespace fsdp::cuda
