// Front end of rotary position embedding: table construction and every precondition,
// checked once for all backends.
#include "fsdp/ops/rope.h"

#include <cmath>
#include <vector>

#include "fsdp/ops/attention.h"  // check_doc_start
#include "op_checks.h"

namespace fsdp {

FSDP_DEFINE_DISPATCH(rope_stub);

RopeTables make_rope_tables(int64_t max_positions, int64_t head_dim, double theta, Device device) {
  FSDP_CHECK(head_dim > 0 && head_dim % 2 == 0, "make_rope_tables: head_dim must be positive and even, got {}",
             head_dim);
  FSDP_CHECK(theta > 0 && std::isfinite(theta), "make_rope_tables: theta must be positive and finite, got {}", theta);
  std::vector<double> inv_freq(size_t(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  return make_rope_tables(max_positions, inv_freq, device);
}

RopeTables make_rope_tables(int64_t max_positions, std::span<const double> inv_freq, Device device) {
  FSDP_CHECK(max_positions >= 0, "make_rope_tables: max_positions must be >= 0, got {}", max_positions);
  FSDP_CHECK(!inv_freq.empty(), "make_rope_tables: no frequencies (head_dim must be positive and even)");
  for (double f : inv_freq)
    FSDP_CHECK(f > 0 && std::isfinite(f), "make_rope_tables: frequencies must be positive and finite, got {}", f);
  // Tables are built on the host; other devices need a host-to-device copy the op set
  // does not offer yet (Tensor::copy_ is host-only).
  FSDP_CHECK(device.is_cpu(), "make_rope_tables: tables for device {} are not supported yet (no host-to-device copy op)",
             device.str());
  const int64_t half = int64_t(inv_freq.size());
  RopeTables t{Tensor::empty({max_positions, half}, DType::F32, device),
               Tensor::empty({max_positions, half}, DType::F32, device)};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  // Angle, cos and sin in double, rounded to float once: Hugging Face computes inv_freq,
  // the angle and cos/sin in float32, whose angle error grows with the position (about
  // p * 2^-24 radians); these tables are the exact values as float32 can hold them.
  for (int64_t i = 0; i < half; ++i) {
    for (int64_t p = 0; p < max_positions; ++p) {
      const double angle = double(p) * inv_freq[size_t(i)];
      c[p * half + i] = float(std::cos(angle));
      s[p * half + i] = float(std::sin(angle));
    }
  }
  return t;
}

namespace {

void rope_common(const Tensor& x, const Tensor& y, const RopeTables& tables, int64_t pos_offset, bool inverse,
                 const Tensor& doc_start, const char* x_name, const char* y_name) {
  detail::check_heads_packed(x, "rope", x_name);
  detail::check_heads_packed(y, "rope", y_name);
  detail::check_floating(x, x_name, "rope");
  check_same_dtype(x, y, x_name, y_name);
  check_shape(y, x.sizes(), y_name);
  check_same_device(x, y, x_name, y_name);
  const int64_t T = x.size(1), D = x.size(3);
  FSDP_CHECK(D % 2 == 0, "rope: head dim of {} must be even, got {}", x_name, x.str());
  check_dim(tables.cos, 2, "tables.cos");
  check_dtype(tables.cos, DType::F32, "tables.cos");
  check_dtype(tables.sin, DType::F32, "tables.sin");
  check_shape(tables.sin, tables.cos.sizes(), "tables.sin");
  check_contiguous(tables.cos, "tables.cos");
  check_contiguous(tables.sin, "tables.sin");
  check_same_device(x, tables.cos, x_name, "tables.cos");
  check_same_device(x, tables.sin, x_name, "tables.sin");
  FSDP_CHECK(tables.cos.size(1) == D / 2, "rope: tables.cos has {} frequencies but {} has head dim {} (needs {})",
             tables.cos.size(1), x_name, D, D / 2);
  FSDP_CHECK(pos_offset >= 0, "rope: pos_offset must be >= 0, got {}", pos_offset);
  FSDP_CHECK(pos_offset + T <= tables.cos.size(0),
             "rope: positions up to pos_offset + T = {} + {} exceed the {} rows of tables.cos", pos_offset, T,
             tables.cos.size(0));
  if (doc_start.defined()) {
    // Positions only shrink (t - doc_start <= t), so the bound above covers them.
    check_dtype(doc_start, DType::I32, "doc_start");
    check_shape(doc_start, Dims{x.size(0), T}, "doc_start");
    check_contiguous(doc_start, "doc_start");
    check_same_device(x, doc_start, x_name, "doc_start");
    if (doc_start.device().is_cpu()) check_doc_start(doc_start, "doc_start");
  }
  if (x.numel() == 0) return;
  rope_stub(x.device(), x, y, tables.cos, tables.sin, pos_offset, inverse, doc_start);
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& y, const RopeTables& tables, int64_t pos_offset,
                  const Tensor& doc_start) {
  rope_common(x, y, tables, pos_offset, /*inverse=*/false, doc_start, "x", "y");
}

void rope_backward(const Tensor& dy, const Tensor& dx, const RopeTables& tables, int64_t pos_offset,
                   const Tensor& doc_start) {
  rope_common(dy, dx, tables, pos_offset, /*inverse=*/true, doc_start, "dy", "dx");
}

}  // namespace fsdp
