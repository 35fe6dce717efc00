// A LoRA adapter's forward and backward over the op set; see lora_adapter.h for the math.
#include "fsdp/model/lora_adapter.h"

#include <algorithm>

#include "fsdp/core/error.h"
#include "fsdp/core/memory_category.h"
#include "fsdp/core/random.h"
#include "fsdp/ops/dropout.h"
#include "fsdp/ops/matmul.h"

namespace fsdp::model {

namespace {

// FNV-1a of a name: a stable number for an adapter's dropout stream.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ uint64_t(static_cast<unsigned char>(c))) * 0x100000001b3ull;
  return h;
}

// The first rows x cols elements of a flat scratch as a contiguous matrix.
Tensor rows_of(const Tensor& flat, int64_t rows, int64_t cols) {
  return flat.narrow(0, 0, rows * cols).reshape({rows, cols});
}

}  // namespace

namespace {

// The scratch's extents: the largest NF4 unit's elements, the largest adapted input width
// and rank.
struct ScratchExtents {
  int64_t nf4 = 0, in = 0, rank = 0;
};

ScratchExtents scratch_extents(const std::vector<UnitLayout>& units) {
  ScratchExtents e;
  for (const UnitLayout& u : units) {
    // A fused NF4 Linear dequantizes its parts side by side: bound it by the unit's NF4
    // elements, which cover every Linear of the unit.
    int64_t unit_nf4 = 0;
    for (const FrozenSlot& f : u.frozen)
      if (f.format == FrozenFormat::Nf4) unit_nf4 += f.numel;
    e.nf4 = std::max(e.nf4, unit_nf4);
    for (const ParamSlot& s : u.params) {
      if (!s.name.ends_with(".lora_A")) continue;
      e.rank = std::max(e.rank, s.shape[0]);
      e.in = std::max(e.in, s.shape[1]);
    }
  }
  return e;
}

}  // namespace

LinearScratch make_linear_scratch(const std::vector<UnitLayout>& units, int64_t rows, DType dtype, Device device) {
  const ScratchExtents e = scratch_extents(units);
  const memory::CategoryScope tag("scratch/lora and nf4");
  LinearScratch s;
  s.rows = rows;
  if (e.nf4 > 0) s.weight = Tensor::empty({e.nf4}, dtype, device);
  if (e.rank > 0) {
    s.xd = Tensor::empty({rows * e.in}, dtype, device);
    s.dxd = Tensor::empty({rows * e.in}, dtype, device);
    s.u = Tensor::empty({rows * e.rank}, dtype, device);
    s.du = Tensor::empty({rows * e.rank}, dtype, device);
  }
  return s;
}

double linear_scratch_bytes(const std::vector<UnitLayout>& units, double rows, DType dtype) {
  const ScratchExtents e = scratch_extents(units);
  const double per_row = e.rank > 0 ? 2.0 * double(e.in) + 2.0 * double(e.rank) : 0.0;
  return (double(e.nf4) + rows * per_row) * double(dtype_size(dtype));
}

LoraAdapter::LoraAdapter(const UnitLayout& unit, const std::string& base) {
  const ParamSlot& a = unit.slot(base + ".lora_A");
  const ParamSlot& b = unit.slot(base + ".lora_B");
  a_ = a.offset;
  b_ = b.offset;
  rank_ = a.shape[0];
  in_ = a.shape[1];
  out_ = b.shape[0];
  FSDP_CHECK(b.shape[1] == rank_, "{}: lora_B is {}, lora_A {}", base, b.shape.str(), a.shape.str());
  scale_ = unit.lora_scale;
  dropout_ = unit.lora_dropout;
  // A row-parallel base's input is this tensor rank's columns of the features: its mask is
  // drawn at their global numbers (See Note [LoRA under tensor parallelism]).
  col0_ = a.tp.dim == 1 ? int64_t(a.tp.index) * in_ : 0;
  stream_ = name_hash(a.name);
}

namespace {

// Calls f(first row, rows, the number of the first) for each run of `rows` numbered
// consecutively: one run from rows.row0, or each of rows.runs (which must cover n rows).
template <typename F>
void for_each_row_run(DropoutRows rows, int64_t n, F&& f) {
  if (rows.runs == nullptr) return f(int64_t(0), n, rows.row0);
  int64_t at = 0;
  for (const RowRun& r : *rows.runs) {
    if (r.rows > 0) f(at, r.rows, r.row0);
    at += r.rows;
  }
  FSDP_CHECK(at == n, "LoRA dropout: row runs cover {} rows of {}", at, n);
}

}  // namespace

Tensor LoraAdapter::adapter_input(const Tensor& x, LinearScratch& s, DropoutRows rows) const {
  if (!s.training || dropout_ == 0) return x;
  const Tensor xd = rows_of(s.xd, x.size(0), in_);
  const uint64_t key = mix_key(s.dropout_key, stream_);
  for_each_row_run(rows, x.size(0), [&](int64_t at, int64_t n, int64_t row0) {
    dropout_forward(x.narrow(0, at, n), xd.narrow(0, at, n), dropout_, key, s.first_row + row0, col0_);
  });
  return xd;
}

void LoraAdapter::dropout_input_grad(const Tensor& dxd, const Tensor& dx, LinearScratch& s, DropoutRows rows) const {
  const uint64_t key = mix_key(s.dropout_key, stream_);
  for_each_row_run(rows, dx.size(0), [&](int64_t at, int64_t n, int64_t row0) {
    dropout_backward(dxd.narrow(0, at, n), dx.narrow(0, at, n), dropout_, key, s.first_row + row0,
                     /*accumulate=*/true, col0_);
  });
}

// A [r, in] and B [out, r] inside a unit's trainable buffer (its parameters or gradients).
LoraAdapter::Pair LoraAdapter::pair(const Tensor& flat) const {
  return Pair{flat.narrow(0, a_, rank_ * in_).reshape({rank_, in_}), flat.narrow(0, b_, out_ * rank_).reshape({out_, rank_})};
}

LinearScratch& LoraAdapter::scratch(const UnitParams& p, int64_t rows) const {
  FSDP_CHECK(p.scratch != nullptr && rows <= p.scratch->rows, "LoRA over {} rows without a scratch for them", rows);
  return *p.scratch;
}

void LoraAdapter::forward(const Tensor& x, const UnitParams& p, const Tensor& y, DropoutRows rows) const {
  const int64_t n = x.size(0);
  LinearScratch& s = scratch(p, n);
  const Pair w = pair(p.params);
  const Tensor u = rows_of(s.u, n, rank_);
  matmul(adapter_input(x, s, rows), w.A, u, false, true);
  matmul(u, w.B, y, false, true, scale_, 1.0);
}

void LoraAdapter::backward(const Tensor& dy, const Tensor& x, const UnitParams& p, const Tensor& dx,
                           DropoutRows rows) const {
  const int64_t n = x.size(0);
  LinearScratch& s = scratch(p, n);
  const Pair w = pair(p.params), g = pair(p.grads);
  const Tensor xin = adapter_input(x, s, rows);
  const Tensor u = rows_of(s.u, n, rank_), du = rows_of(s.du, n, rank_);
  matmul(xin, w.A, u, false, true);
  matmul(dy, u, g.B, true, false, scale_, 1.0);
  matmul(dy, w.B, du, false, false, scale_, 0.0);
  matmul(du, xin, g.A, true, false, 1.0, 1.0);
  if (!s.training || dropout_ == 0) {
    matmul(du, w.A, dx, false, false, 1.0, 1.0);
    return;
  }
  const Tensor dxd = rows_of(s.dxd, n, in_);
  matmul(du, w.A, dxd, false, false);
  dropout_input_grad(dxd, dx, s, rows);
}

}  // namespace fsdp::model
