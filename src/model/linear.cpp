// Linear over the op set's GEMM; see linear.h. The order inside backward (dW first, then
// dx) is the one every test's bits were taken with.
#include "fsdp/model/linear.h"

#include "fsdp/core/error.h"
#include "fsdp/ops/matmul.h"

namespace fsdp::model {

Linear::Linear(const UnitLayout& unit, std::initializer_list<std::string> slots) {
  FSDP_CHECK(slots.size() > 0, "Linear over no slots of unit {}", unit.name);
  bool first = true;
  for (const std::string& name : slots) {
    const ParamSlot& s = unit.slot(name);
    FSDP_CHECK(s.shape.size() == 2, "{} is not a matrix: {}", s.name, s.shape.str());
    if (first) {
      offset_ = s.offset;
      in_ = s.shape[1];
      first = false;
    }
    FSDP_CHECK(s.offset == offset_ + out_ * in_ && s.shape[1] == in_,
               "unit layout of {} breaks the fused q|k|v and gate|up adjacency at {}", unit.name, s.name);
    out_ += s.shape[0];
  }
}

Tensor Linear::weight(const Tensor& flat) const { return flat.narrow(0, offset_, out_ * in_).reshape({out_, in_}); }

void Linear::forward(const Tensor& x, const Tensor& params, const Tensor& y, bool accumulate) const {
  matmul(x, weight(params), y, false, true, 1.0, accumulate ? 1.0 : 0.0);
}

void Linear::backward(const Tensor& dy, const Tensor& x, const Tensor& params, const Tensor& grads,
                      const Tensor& dx) const {
  matmul(dy, x, weight(grads), true, false, 1.0, 1.0);
  matmul(dy, weight(params), dx, false, false);
}

}  // namespace fsdp::model
