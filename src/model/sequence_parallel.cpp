// The sequence-parallel mappings; see Note [Sequence parallelism] in sequence_parallel.h.
#include "fsdp/model/sequence_parallel.h"

#include "fsdp/core/error.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp::model {

const SequenceParallel kNoSequenceParallel{};

TensorGroup& SequenceParallel::group() const {
  FSDP_CHECK(group_ != nullptr, "sequence parallelism: no tensor group");
  return *group_;
}

void SequenceParallel::use(const Tensor& gathered, const Tensor& partial, VocabParallelStats* stats) {
  gathered_ = gathered;
  partial_ = partial;
  stats_ = stats;
}

VocabParallelStats& SequenceParallel::stats() const {
  FSDP_CHECK(stats_ != nullptr, "sequence parallelism: the pass's cross-entropy scratch was not set");
  return *stats_;
}

namespace {

// The first n rows of an [N, C] scratch buffer.
Tensor rows_of(const Tensor& buffer, int64_t n, const char* what) {
  FSDP_CHECK(buffer.defined() && buffer.size(0) >= n, "sequence parallelism: the {} scratch ({}) holds fewer than {} rows",
             what, buffer.defined() ? buffer.str() : std::string("undefined"), n);
  return buffer.narrow(0, 0, n);
}

}  // namespace

Tensor SequenceParallel::gather(const Tensor& rows) const {
  if (!on()) return rows;
  const Tensor full = rows_of(gathered_, rows.size(0) * size(), "gathered");
  group_->all_gather(rows, full);  // backward twin: gather_backward's reduce-scatter
  return full;
}

void SequenceParallel::gather_backward(const Tensor& full, const Tensor& rows) const {
  if (!on()) return;
  group_->reduce_scatter(full, rows);  // forward twin: gather's all-gather
}

Tensor SequenceParallel::gathered_for(const Tensor& rows) const {
  if (!on()) return rows;
  return rows_of(gathered_, rows.size(0) * size(), "gathered");
}

Tensor SequenceParallel::partial_for(const Tensor& rows) const {
  if (!on()) return rows;
  return rows_of(partial_, rows.size(0) * size(), "partial");
}

void SequenceParallel::scatter(const Linear& lin, const Tensor& in, const UnitParams& p, const Tensor& x,
                               const Tensor& out) const {
  if (!on()) {
    // out = x + in W^T, the residual add folded into the GEMM's beta.
    if (out.data_ptr() != x.data_ptr()) cast(x, out);
    lin.forward(in, p, out, /*accumulate=*/true);
    return;
  }
  const Tensor partial = rows_of(partial_, in.size(0), "partial");
  lin.forward(in, p, partial);
  scatter_sum(partial, x, out);
}

void SequenceParallel::scatter_sum(const Tensor& partial, const Tensor& x, const Tensor& out) const {
  FSDP_CHECK(on(), "sequence parallelism: scatter_sum without a tensor group");
  FSDP_CHECK(out.data_ptr() != x.data_ptr(), "sequence parallelism: a row-parallel output must not overwrite its input");
  group_->reduce_scatter(partial, out);  // backward twin: scatter_backward's all-gather
  add(out, x, out);
}

}  // namespace fsdp::model
