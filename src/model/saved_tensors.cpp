// The binder that allocates, and the byte count the memory plan sums; see saved_tensors.h.
#include "fsdp/model/saved_tensors.h"

namespace fsdp::model {

SavedBinder allocate_on(Device device) {
  return [device](Tensor& member, const SavedSpec& spec) { member = Tensor::empty(spec.sizes, spec.dtype, device); };
}

double spec_bytes(const SavedSpec& spec) {
  double n = double(dtype_size(spec.dtype));
  for (int i = 0; i < spec.sizes.size(); ++i) n *= double(spec.sizes[i]);
  return n;
}

}  // namespace fsdp::model
