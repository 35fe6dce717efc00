// Token embedding, forward and backward (fsdp/ops/embedding.h; the CPU's is
// src/ops/cpu/embedding.cpp):
//   forward:  out[n, :] = table[ids[n], :]              (a row gather, 2-D grid)
//   backward: dtable[ids[n], :] += dout[n, :]
// The vocabulary-parallel variants (embedding_shard_*) are the same kernels on a table
// holding the rows [begin, begin + rows) of the vocabulary: an id of another shard gives
// a zero row forward and adds nothing backward (EmbeddingIds in embedding.cuh).
//
// Backward without atomics and in the CPU's order: one thread per column walks the rows
// n = 0..N-1 and adds into dtable[ids[n], c]. Each dtable element is updated by one thread
// only, in increasing n, so repeated ids cannot race and the bits equal the CPU's. The
// price is C-way parallelism with an N-long loop; a sort-by-id kernel is the faster
// deterministic design when this shows up in a profile.
//
// Ids are validated by the kernels themselves, without a wait of the host: an id outside
// [0, vocab) is written to the device error record (Note [Device error record] in
// fsdp/core/cuda.h, raised with the CPU's message at the next read-back) by the thread of
// column 0, and its row is skipped: the forward writes zeros there, the backward adds
// nothing; no thread reads or writes outside the table. The grid always has a column-0
// thread, also for a table of width 0, so every id is checked as on the CPU.
#include "common.cuh"
#include "embedding.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// The table row of ids[i] when it is inside the vocabulary and this table's rows; else
// -1, after column 0's thread recorded an id outside the vocabulary.
template <typename I>
__device__ __forceinline__ int64_t checked_row(const I* ids, int64_t i, int64_t j, const EmbeddingIds& a) {
  const int64_t id = int64_t(ids[i]);
  if (id < 0 || id >= a.vocab) {
    if (j == 0) report_device_error(a.errors, a.op, i, id, a.vocab);
    return -1;
  }
  const int64_t row = id - a.begin;
  return row >= 0 && row < a.rows ? row : -1;
}

template <typename T, typename I>
__global__ void embedding_fwd_kernel(const I* __restrict__ ids, EmbeddingIds a, RowsView table, RowsView out,
                                     int64_t c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c && j != 0) return;
  const T* tp = static_cast<const T*>(table.data);
  T* op = static_cast<T*>(out.data);
  for (int64_t i = blockIdx.y; i < a.n; i += gridDim.y) {
    const int64_t row = checked_row(ids, i, j, a);
    if (j < c) op[i * out.stride + j] = row < 0 ? T{} : tp[row * table.stride + j];
  }
}

template <typename T, typename I>
__global__ void embedding_bwd_kernel(const I* __restrict__ ids, EmbeddingIds a, RowsView dout, RowsView dtable,
                                     int64_t c) {
  using E = Elem<T>;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c && j != 0) return;
  const T* dp = static_cast<const T*>(dout.data);
  T* tp = static_cast<T*>(dtable.data);
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t row = checked_row(ids, i, j, a);
    if (row < 0 || j >= c) continue;
    T* dst = tp + row * dtable.stride + j;
    *dst = E::store(E::load(*dst) + E::load(dp[i * dout.stride + j]));
  }
}

dim3 grid_2d(int64_t n, int64_t c) { return dim3(blocks_for(c, kThreads), unsigned(n < 65535 ? n : 65535)); }

template <typename T, typename I>
void forward_t(const EmbeddingIds& a, RowsView table, RowsView out, int64_t c, cudaStream_t s) {
  FSDP_LAUNCH((embedding_fwd_kernel<T, I>), grid_2d(a.n, c), kThreads, 0, s, static_cast<const I*>(a.ids), a, table,
              out, c);
}

template <typename T, typename I>
void backward_t(const EmbeddingIds& a, RowsView dout, RowsView dtable, int64_t c, cudaStream_t s) {
  FSDP_LAUNCH((embedding_bwd_kernel<T, I>), blocks_for(c, kThreads), kThreads, 0, s, static_cast<const I*>(a.ids), a,
              dout, dtable, c);
}

template <typename T>
void forward_ids(const EmbeddingIds& a, RowsView table, RowsView out, int64_t c, cudaStream_t s) {
  if (a.dtype == DType::I64) return forward_t<T, int64_t>(a, table, out, c, s);
  return forward_t<T, int32_t>(a, table, out, c, s);
}

template <typename T>
void backward_ids(const EmbeddingIds& a, RowsView dout, RowsView dtable, int64_t c, cudaStream_t s) {
  if (a.dtype == DType::I64) return backward_t<T, int64_t>(a, dout, dtable, c, s);
  return backward_t<T, int32_t>(a, dout, dtable, c, s);
}

}  // namespace

bool embedding_supports(DType t) { return is_floating(t); }

void launch_embedding_forward(DType t, const EmbeddingIds& ids, RowsView table, RowsView out, int64_t c,
                              cudaStream_t stream) {
  with_element_type(t, [&](auto element) { forward_ids<decltype(element)>(ids, table, out, c, stream); });
}

void launch_embedding_backward(DType t, const EmbeddingIds& ids, RowsView dout, RowsView dtable, int64_t c,
                               cudaStream_t stream) {
  with_element_type(t, [&](auto element) { backward_ids<decltype(element)>(ids, dout, dtable, c, stream); });
}

}  // namespace fsdp::cuda
