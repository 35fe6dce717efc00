// Private to the op front ends (src/ops/*.cpp): argument checks that several ops share,
// on top of the per-tensor ones of fsdp/core/tensor.h, so that the same fault gives the
// same message from every op. `op`, where taken, prefixes the message ("rope: ...").
#pragma once

#include "fsdp/core/tensor.h"

namespace fsdp::detail {

// t has a floating-point dtype.
inline void check_floating(const Tensor& t, const char* what, const char* op = nullptr) {
  FSDP_CHECK(is_floating(t.dtype()), "{}{}{} must be a floating-point tensor, got {}", op != nullptr ? op : "",
             op != nullptr ? ": " : "", what, t.str());
}

// A 2-D floating-point operand whose rows are packed (the row stride is free, so a column
// slice of a wider buffer works): rmsnorm's x, swiglu's gate, the logits, a table.
inline void check_float_rows(const Tensor& t, const char* what) {
  check_dim(t, 2, what);
  check_floating(t, what);
  check_rows_packed(t, what);
}

// t has the shape, dtype and device of `like` and packed rows.
inline void check_rows_like(const Tensor& t, const Tensor& like, const char* what, const char* like_what) {
  check_shape(t, like.sizes(), what);
  check_same_dtype(t, like, what, like_what);
  check_rows_packed(t, what);
  check_same_device(t, like, what, like_what);
}

// [B, T, heads, D] with (heads, D) packed and dims 0-1 free: what attention and rope index
// as rows of heads * D, e.g. q, k, v as views of one fused projection buffer.
inline void check_heads_packed(const Tensor& t, const char* op, const char* what) {
  check_dim(t, 4, what);
  FSDP_CHECK((t.stride(3) == 1 || t.size(3) == 1) && (t.stride(2) == t.size(3) || t.size(2) == 1),
             "{}: {} must have its last two dims packed (stride(3) == 1, stride(2) == D), got {} with strides {}", op,
             what, t.str(), t.strides().str());
}

}  // namespace fsdp::detail
