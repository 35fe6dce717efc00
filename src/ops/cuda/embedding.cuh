// Launchers of the embedding kernels (embedding.cu), called by embedding.cpp. ids: n
// int32 or int64 values; table/dtable [V, C] and out/dout [n, C] with row strides.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fsdp/core/cuda_device_error.h"
#include "fsdp/core/dtype.h"
#include "rows.h"

namespace fsdp::cuda {

bool embedding_supports(DType t);  // float32, float64, bfloat16, float16

// The ids and what they are checked against (Note [Device error record] in
// fsdp/core/cuda.h): an id outside [0, vocab) is recorded in `errors` as `op` and its row
// skipped. The table holds the vocabulary rows [begin, begin + rows): the whole table is
// begin 0, rows vocab; a vocabulary shard (embedding_shard_*) gives zeros for the ids of
// other shards in the forward and adds nothing for them in the backward.
struct EmbeddingIds {
  const void* ids;
  DType dtype;  // int32 or int64
  int64_t n;
  int64_t vocab;
  DeviceErrorRecord* errors;
  int64_t begin;
  int64_t rows;
  DeviceErrorOp op;
};

void launch_embedding_forward(DType t, const EmbeddingIds& ids, RowsView table, RowsView out, int64_t c,
                              cudaStream_t stream);
void launch_embedding_backward(DType t, const EmbeddingIds& ids, RowsView dout, RowsView dtable, int64_t c,
                               cudaStream_t stream);

}  // namespace fsdp::cuda
