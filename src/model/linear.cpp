// Linear over the op set's GEMM; see linear.h. For a trainable weight the order inside
// backward (dW first, then dx) is the one every test's bits were taken with; adapters add
// their share after the base.
#include "fsdp/model/linear.h"

#include "fsdp/core/error.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/ops/matmul.h"
#include "fsdp/ops/nf4.h"

namespace fsdp::model {

Linear::Linear(const UnitLayout& unit, std::initializer_list<std::string> slots) {
  FSDP_CHECK(slots.size() > 0, "Linear over no slots of unit {}", unit.name);
  bool first = true;
  int64_t end = 0;  // where the next slot must start (elements or bytes)
  for (const std::string& name : slots) {
    const SlotRef ref = unit.find(name);
    const Dims& shape = ref.trainable ? ref.trainable->shape : ref.frozen->shape;
    FSDP_CHECK(shape.size() == 2, "{} is not a matrix: {}", name, shape.str());
    const Source source = ref.trainable                                ? Source::Trainable
                          : ref.frozen->format == FrozenFormat::Dense ? Source::Frozen
                                                                       : Source::FrozenNf4;
    const int64_t start = ref.trainable ? ref.trainable->offset : ref.frozen->byte_offset;
    if (first) {
      source_ = source;
      offset_ = start;
      in_ = shape[1];
      if (ref.frozen) frozen_dtype_ = ref.frozen->dtype;
      end = start;
      first = false;
    }
    FSDP_CHECK(source == source_ && shape[1] == in_, "{} of unit {} does not fuse with {}: fused slots share their "
               "input width and are all trainable or all frozen", name, unit.name, *slots.begin());
    // Dense parts must be adjacent so that one GEMM reads them; NF4 parts are dequantized
    // one by one into adjacent rows of the scratch.
    FSDP_CHECK(source == Source::FrozenNf4 || start == end,
               "unit layout of {} breaks the fused q|k|v and gate|up adjacency at {}", unit.name, name);
    Part part;
    part.row = out_;
    part.rows = shape[0];
    if (source == Source::FrozenNf4) part.nf4 = *ref.frozen;
    if (unit.has(name + ".lora_A")) part.adapter.emplace(unit, name);
    parts_.push_back(std::move(part));
    out_ += shape[0];
    end = ref.trainable ? start + ref.trainable->numel : start + ref.frozen->bytes;
  }
}

Tensor Linear::weight(const UnitParams& p) const {
  switch (source_) {
    case Source::Trainable: return p.params.narrow(0, offset_, out_ * in_).reshape({out_, in_});
    case Source::Frozen: return p.frozen.reinterpret(frozen_dtype_, offset_, {out_, in_});
    case Source::FrozenNf4: break;
  }
  FSDP_CHECK(p.scratch != nullptr && p.scratch->weight.numel() >= out_ * in_,
             "Linear over an NF4 weight needs a dequantization scratch of {} elements", out_ * in_);
  const Tensor w = p.scratch->weight.narrow(0, 0, out_ * in_);
  for (const Part& part : parts_)
    nf4_dequantize(nf4_pieces_of(p.frozen, part.nf4), part.nf4.dtype, w.narrow(0, part.row * in_, part.rows * in_));
  return w.reshape({out_, in_});
}

void Linear::forward(const Tensor& x, const UnitParams& p, const Tensor& y, bool accumulate, DropoutRows rows) const {
  matmul(x, weight(p), y, false, true, 1.0, accumulate ? 1.0 : 0.0);
  for (const Part& part : parts_)
    if (part.adapter) part.adapter->forward(x, p, y.narrow(1, part.row, part.rows), rows);
}

void Linear::backward(const Tensor& dy, const Tensor& x, const UnitParams& p, const Tensor& dx, DropoutRows rows) const {
  if (source_ == Source::Trainable) {
    matmul(dy, x, p.grads.narrow(0, offset_, out_ * in_).reshape({out_, in_}), true, false, 1.0, 1.0);
  }
  matmul(dy, weight(p), dx, false, false);
  for (const Part& part : parts_)
    if (part.adapter) part.adapter->backward(dy.narrow(1, part.row, part.rows), x, p, dx, rows);
}

}  // namespace fsdp::model
