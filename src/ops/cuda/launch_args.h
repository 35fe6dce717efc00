// Host side of the CUDA ops (src/ops/cuda/*.cpp), written once: the stream, the dtype
// check against the kernels' <op>_supports, and how a Tensor becomes a launcher's layout
// argument. Layouts were validated by the op's front end; these only read pointers and
// strides. Not for .cu files (Tensor pulls in fmt).
#pragma once

#include <cuda_runtime.h>

#include "fsdp/core/cuda.h"
#include "fsdp/core/tensor.h"
#include "rows.h"

namespace fsdp::cuda {

// The stream the op runs on: the current stream of the tensor's device.
inline cudaStream_t stream_of(const Tensor& t) { return static_cast<cudaStream_t>(current_stream(t.device().index)); }

// A 2-D tensor with packed rows and its row stride. With fewer than two rows stride(0)
// may be anything, so the row length stands in for it; an undefined tensor (an optional
// output) is {nullptr, 0}.
inline RowsView rows(const Tensor& t) {
  if (!t.defined()) return RowsView{nullptr, 0};
  return RowsView{t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)};
}

// The one error of a CUDA op asked for a dtype its kernels do not implement; `supports` is
// the op's <op>_supports from its .cuh.
inline void check_implemented(const char* op, DType t, bool (*supports)(DType)) {
  FSDP_CHECK(supports(t), "{}: dtype {} is not implemented on the CUDA backend", op, dtype_name(t));
}

// A [B, T, heads, D] tensor with (heads, D) packed: head h of row (b, t) at b*s0 + t*s1 + h*D.
inline HeadsView heads(const Tensor& t) { return HeadsView{t.data_ptr(), t.stride(0), t.stride(1), t.size(3)}; }

}  // namespace fsdp::cuda
