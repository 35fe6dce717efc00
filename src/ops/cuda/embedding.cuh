// Launchers of the embedding kernels (embedding.cu), called by embedding.cpp. ids: n
// int32 or int64 values; table/dtable [V, C] and out/dout [n, C] with row strides.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool embedding_supports(DType t);  // float32, float64, bfloat16, float16

// The first position whose id is outside [0, vocab), and that id; position -1 when all are
// in range. Waits for the stream (the caller raises the error before any output is written).
struct BadId {
  int64_t position;
  int64_t id;
};
BadId find_bad_id(DType id_t, const void* ids, int64_t n, int64_t vocab, cudaStream_t stream);

void launch_embedding_forward(DType t, DType id_t, const void* ids, RowsView table, RowsView out, int64_t n, int64_t c,
                              cudaStream_t stream);
void launch_embedding_backward(DType t, DType id_t, const void* ids, RowsView dout, RowsView dtable, int64_t n,
                               int64_t c, cudaStream_t stream);

}  // namespace fsdp::cuda
