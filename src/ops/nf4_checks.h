// Private to the NF4 front end and the host quantizer (src/ops/nf4.cpp, cpu/nf4.cpp): the
// one check that an Nf4Tensors holds every piece of a weight of `numel` elements.
#pragma once

#include "fsdp/ops/nf4.h"

namespace fsdp::detail {

// Each piece defined, contiguous, of its dtype and element count, on `device`; the error
// names the piece.
void check_nf4_pieces(const Nf4Tensors& w, int64_t numel, Device device);

}  // namespace fsdp::detail
