#include "fsdp/core/device_kernels.h"

#include <cmath>

namespace fsdp {

FSDP_DEFINE_DISPATCH(fill_stub);
FSDP_DEFINE_DISPATCH(cast_stub);

void check_fill_value(const Tensor& t, double value) {
  FSDP_CHECK(is_floating(t.dtype()) || std::isfinite(value), "cannot fill integer tensor {} with {}", t.str(), value);
}

}  // namespace fsdp
