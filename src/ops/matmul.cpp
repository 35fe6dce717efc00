// Front end of matmul: every precondition is checked here, once for all backends, so a
// backend may assume well-formed 2-D packed-row operands of matching shapes.
#include "fsdp/ops/matmul.h"

#include <algorithm>
#include <limits>

#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(matmul_stub);

namespace {

// A row-strided 2-D operand: rows must not overlap one another (BLAS requires ld >= cols;
// with a single row the row stride is never used, so any value is fine).
void check_matrix(const Tensor& t, const char* what) {
  check_dim(t, 2, what);
  check_rows_packed(t, what);
  FSDP_CHECK(t.size(0) <= 1 || t.stride(0) >= t.size(1),
             "matmul: {} has overlapping rows: row stride {} < row length {} ({})", what, t.stride(0), t.size(1),
             t.str());
}

// Half-open element range [lo, hi) of storage that a 2-D packed-rows view touches.
struct Span {
  int64_t lo, hi, ld, cols;
};
Span span_of(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const int64_t ld = rows <= 1 ? cols : t.stride(0);
  return {t.offset(), t.offset() + (rows - 1) * ld + cols, ld, cols};
}

// True when c may share an element with x. BLAS reads a and b while it writes c, so any
// overlap gives an undefined result. Views with the same row stride (column slices of one
// fused buffer, e.g. q|k|v or gate|up) are compared by their column windows so that
// side-by-side slices are not rejected; anything else is judged by its extent.
bool may_overlap(const Tensor& c, const Tensor& x) {
  if (c.numel() == 0 || x.numel() == 0 || c.storage() != x.storage() || c.storage() == nullptr) return false;
  if (c.element_size() != x.element_size()) return true;  // different dtypes on one storage: be conservative
  const Span a = span_of(c), b = span_of(x);
  if (a.hi <= b.lo || b.hi <= a.lo) return false;
  if (a.ld == b.ld && a.cols <= a.ld && b.cols <= b.ld) {
    // Both views repeat with period ld: compare their column windows on a circle of length ld.
    const int64_t ld = a.ld;
    const int64_t ca = a.lo % ld, cb = b.lo % ld;
    auto hits = [ld](int64_t s0, int64_t n0, int64_t s1, int64_t n1) {
      // does [s0, s0+n0) meet [s1, s1+n1) or its copy shifted by +ld?
      return (s0 < s1 + n1 && s1 < s0 + n0) || (s0 < s1 + ld + n1 && s1 + ld < s0 + n0);
    };
    return hits(ca, a.cols, cb, b.cols) || hits(cb, b.cols, ca, a.cols);
  }
  return true;
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, double alpha,
            double beta) {
  check_matrix(a, "a");
  check_matrix(b, "b");
  check_matrix(c, "c");
  detail::check_floating(a, "a", "matmul");
  check_same_dtype(a, b, "a", "b");
  check_same_dtype(a, c, "a", "c");
  check_same_device(a, b, "a", "b");
  check_same_device(a, c, "a", "c");

  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  FSDP_CHECK(k == kb, "matmul: inner dimensions differ: op(a) is [{}, {}] (a {}, trans_a={}) but op(b) is [{}, {}] (b {}, trans_b={})",
             m, k, a.sizes().str(), trans_a, kb, n, b.sizes().str(), trans_b);
  FSDP_CHECK(c.size(0) == m && c.size(1) == n, "matmul: c must have shape [{}, {}] (rows of op(a), columns of op(b)), got {}",
             m, n, c.str());
  FSDP_CHECK(!may_overlap(c, a), "matmul: c ({}) overlaps a ({}) in memory", c.str(), a.str());
  FSDP_CHECK(!may_overlap(c, b), "matmul: c ({}) overlaps b ({}) in memory", c.str(), b.str());
  // BLAS takes int dimensions and leading dimensions.
  const int64_t limit = std::numeric_limits<int>::max();
  for (const Tensor* t : {&a, &b, &c})
    FSDP_CHECK(t->size(0) <= limit && t->size(1) <= limit && t->stride(0) <= limit,
               "matmul: operand {} is too large for a 32-bit BLAS interface", t->str());

  if (m == 0 || n == 0) return;  // nothing to write
  matmul_stub(a.device(), a, b, c, trans_a, trans_b, alpha, beta);
}

}  // namespace fsdp
