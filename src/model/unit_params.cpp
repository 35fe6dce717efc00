#include "fsdp/model/unit_params.h"

#include "fsdp/core/error.h"

namespace fsdp::model {

ParamRef::ParamRef(const UnitLayout& unit, const std::string& name) {
  const SlotRef s = unit.find(name);
  if (s.trainable != nullptr) {
    shape_ = s.trainable->shape;
    offset_ = s.trainable->offset;
    return;
  }
  FSDP_CHECK(s.frozen->format == FrozenFormat::Dense, "{} is stored as NF4; only a Linear can read it", name);
  shape_ = s.frozen->shape;
  frozen_ = true;
  offset_ = s.frozen->byte_offset;
  dtype_ = s.frozen->dtype;
}

Tensor ParamRef::value(const UnitParams& p) const {
  if (frozen_) return p.frozen.reinterpret(dtype_, offset_, shape_);
  return p.params.narrow(0, offset_, shape_.numel()).reshape(shape_);
}

Tensor ParamRef::grad(const UnitParams& p) const {
  if (frozen_) return Tensor();
  return p.grads.narrow(0, offset_, shape_.numel()).reshape(shape_);
}

}  // namespace fsdp::model
