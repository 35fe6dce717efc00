// CPU embedding: out[n, :] = table[ids[n], :], and its backward dtable[ids[n], :] += dout[n, :].
//
// Layout: table / dtable [V, C] and out / dout [N, C], each with packed rows and its own
// row stride; ids [N] int32 or int64, contiguous.
//
// Backward parallelises over column chunks, and every thread walks the rows in order
// n = 0..N-1 for its own columns. So each dtable element receives its updates in the same
// order whatever the thread count (the same bits with 1 or 64 threads), two threads never
// touch one element (repeated ids cannot race), and no scratch buffer is needed.
#include <algorithm>
#include <cstdint>

#include "unsupported.h"
#include "fsdp/ops/embedding.h"

namespace fsdp {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 15;
// Columns per backward work item: 256 bytes of float, so threads never share a cache line
// of dtable unless C itself is narrow.
constexpr int64_t kColChunk = 64;

// Checked serially before any work so an error leaves every output untouched (throwing
// inside an OpenMP region would terminate the process).
template <typename I>
void check_ids_in_range(const I* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = int64_t(ids[i]);
    FSDP_CHECK(id >= 0 && id < vocab, "token id {} at position {} is outside the vocabulary [0, {})", id, i, vocab);
  }
}

template <typename T, typename I>
void forward_impl(const Tensor& ids_t, const Tensor& table_t, const Tensor& out_t) {
  const I* ids = ids_t.data<I>();
  const int64_t n = ids_t.numel(), c = table_t.size(1);
  check_ids_in_range(ids, n, table_t.size(0));
  const T* table = table_t.data<T>();
  T* out = out_t.data<T>();
  const int64_t ts = table_t.stride(0), os = out_t.stride(0);
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) std::copy_n(table + int64_t(ids[i]) * ts, c, out + i * os);
}

template <typename T, typename I>
void backward_impl(const Tensor& ids_t, const Tensor& dout_t, const Tensor& dtable_t) {
  const I* ids = ids_t.data<I>();
  const int64_t n = ids_t.numel(), c = dtable_t.size(1);
  check_ids_in_range(ids, n, dtable_t.size(0));
  const T* dout = dout_t.data<T>();
  T* dtable = dtable_t.data<T>();
  const int64_t os = dout_t.stride(0), ts = dtable_t.stride(0);
  const int64_t chunks = (c + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColChunk, len = std::min(kColChunk, c - c0);
    for (int64_t i = 0; i < n; ++i) {
      const T* src = dout + i * os + c0;
      T* dst = dtable + int64_t(ids[i]) * ts + c0;
      for (int64_t j = 0; j < len; ++j) dst[j] += src[j];
    }
  }
}

// The vocabulary shard [begin, begin + rows) of a vocabulary of `vocab`: ids outside the
// vocabulary are errors; ids of other shards give zero rows (forward) and nothing (backward).
template <typename T, typename I>
void shard_forward_impl(const Tensor& ids_t, const Tensor& table_t, const Tensor& out_t, int64_t begin,
                        int64_t vocab) {
  const I* ids = ids_t.data<I>();
  const int64_t n = ids_t.numel(), c = table_t.size(1), rows = table_t.size(0);
  check_ids_in_range(ids, n, vocab);
  const T* table = table_t.data<T>();
  T* out = out_t.data<T>();
  const int64_t ts = table_t.stride(0), os = out_t.stride(0);
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = int64_t(ids[i]) - begin;
    if (row >= 0 && row < rows) {
      std::copy_n(table + row * ts, c, out + i * os);
    } else {
      std::fill_n(out + i * os, c, T(0));
    }
  }
}

template <typename T, typename I>
void shard_backward_impl(const Tensor& ids_t, const Tensor& dout_t, const Tensor& dtable_t, int64_t begin,
                         int64_t vocab) {
  const I* ids = ids_t.data<I>();
  const int64_t n = ids_t.numel(), c = dtable_t.size(1), rows = dtable_t.size(0);
  check_ids_in_range(ids, n, vocab);
  const T* dout = dout_t.data<T>();
  T* dtable = dtable_t.data<T>();
  const int64_t os = dout_t.stride(0), ts = dtable_t.stride(0);
  const int64_t chunks = (c + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (n * c >= kMinParallelWork)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColChunk, len = std::min(kColChunk, c - c0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = int64_t(ids[i]) - begin;
      if (row < 0 || row >= rows) continue;
      const T* src = dout + i * os + c0;
      T* dst = dtable + row * ts + c0;
      for (int64_t j = 0; j < len; ++j) dst[j] += src[j];
    }
  }
}

void embedding_shard_forward_cpu(const Tensor& ids, const Tensor& table, const Tensor& out, int64_t begin,
                                 int64_t vocab) {
  const bool i64 = ids.dtype() == DType::I64;
  switch (table.dtype()) {
    case DType::F32:
      return i64 ? shard_forward_impl<float, int64_t>(ids, table, out, begin, vocab)
                 : shard_forward_impl<float, int32_t>(ids, table, out, begin, vocab);
    case DType::F64:
      return i64 ? shard_forward_impl<double, int64_t>(ids, table, out, begin, vocab)
                 : shard_forward_impl<double, int32_t>(ids, table, out, begin, vocab);
    default:
      cpu::unsupported("embedding_shard_forward", table.dtype());
  }
}

void embedding_shard_backward_cpu(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t begin,
                                  int64_t vocab) {
  const bool i64 = ids.dtype() == DType::I64;
  switch (dtable.dtype()) {
    case DType::F32:
      return i64 ? shard_backward_impl<float, int64_t>(ids, dout, dtable, begin, vocab)
                 : shard_backward_impl<float, int32_t>(ids, dout, dtable, begin, vocab);
    case DType::F64:
      return i64 ? shard_backward_impl<double, int64_t>(ids, dout, dtable, begin, vocab)
                 : shard_backward_impl<double, int32_t>(ids, dout, dtable, begin, vocab);
    default:
      cpu::unsupported("embedding_shard_backward", dtable.dtype());
  }
}

void embedding_forward_cpu(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const bool i64 = ids.dtype() == DType::I64;
  switch (table.dtype()) {
    case DType::F32:
      return i64 ? forward_impl<float, int64_t>(ids, table, out) : forward_impl<float, int32_t>(ids, table, out);
    case DType::F64:
      return i64 ? forward_impl<double, int64_t>(ids, table, out) : forward_impl<double, int32_t>(ids, table, out);
    default:
      cpu::unsupported("embedding_forward", table.dtype());
  }
}

void embedding_backward_cpu(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const bool i64 = ids.dtype() == DType::I64;
  switch (dtable.dtype()) {
    case DType::F32:
      return i64 ? backward_impl<float, int64_t>(ids, dout, dtable) : backward_impl<float, int32_t>(ids, dout, dtable);
    case DType::F64:
      return i64 ? backward_impl<double, int64_t>(ids, dout, dtable)
                 : backward_impl<double, int32_t>(ids, dout, dtable);
    default:
      cpu::unsupported("embedding_backward", dtable.dtype());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(embedding_forward_stub, DeviceType::CPU, &embedding_forward_cpu);
FSDP_REGISTER_DISPATCH(embedding_backward_stub, DeviceType::CPU, &embedding_backward_cpu);
FSDP_REGISTER_DISPATCH(embedding_shard_forward_stub, DeviceType::CPU, &embedding_shard_forward_cpu);
FSDP_REGISTER_DISPATCH(embedding_shard_backward_stub, DeviceType::CPU, &embedding_shard_backward_cpu);

}  // namespace fsdp
