// A unit's frozen bytes (param_units.h) from its parameters' values, and the values back.
//
// Filling works on any byte range, so a rank writes only its shard: a dense slot converts
// just the elements the range covers (float32, bfloat16 or float16, rounded to nearest
// even), an NF4 slot is quantized whole (its statistics need every block) and the range's
// bytes of its pieces copied out, or its pieces are taken as stored when the source has
// them (a bitsandbytes checkpoint). Bytes of the range that no slot covers (alignment
// padding, FSDP padding past the end) are zero.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"
#include "fsdp/ops/nf4.h"

namespace fsdp::model {

// Where a frozen base comes from: a Hugging Face folder, a bitsandbytes folder, the seeded
// initialiser.
class FrozenSource {
 public:
  virtual ~FrozenSource() = default;
  // Elements [first, first + out.numel()) of the slot's values (row-major), float32 on the host.
  virtual void values(const FrozenSlot& slot, int64_t first, const Tensor& out) = 0;
  // An NF4 slot's pieces as the source stores them (host views of the right sizes); false
  // when the source holds values to quantize instead.
  virtual bool nf4_pieces(const FrozenSlot& /*slot*/, const Nf4Tensors& /*out*/) { return false; }
};

// Writes bytes [begin, begin + out.numel()) of `unit`'s frozen buffer into `out` (uint8, host).
void fill_frozen_bytes(const UnitLayout& unit, const Tensor& out, int64_t begin, FrozenSource& source);

// One NF4 slot's pieces inside a unit's frozen bytes (any device).
Nf4Tensors nf4_pieces_of(const Tensor& frozen, const FrozenSlot& slot);

// A frozen slot's values as float32 (`out`: host or device, slot.numel elements): dense
// slots widened, NF4 slots dequantized (rounded through the weight's dtype, as they
// compute). `frozen` is the unit's whole frozen buffer on out's device.
void frozen_slot_values(const Tensor& frozen, const FrozenSlot& slot, const Tensor& out);

}  // namespace fsdp::model
