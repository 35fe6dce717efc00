// Seeded initialisation of one unit's parameters, element by element from a counter-based
// generator keyed by (seed, unit, element offset): any slice of the flat buffer can be
// initialised on its own and gets the same values, whatever the sharding.
#pragma once

#include <cstdint>

#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

// `flat` holds the elements [begin, begin + flat.numel()) of the unit. float32, CPU.
// Matrices get normal(0, init_std), norm weights ones, LoRA's A Kaiming-uniform (bound
// 1/sqrt(fan_in)) and B zeros (ParamSlot::init_kind), padding past the unit zero. A LoRA
// layout's adapters draw from the key of their unit index like any parameter.
void init_unit(const UnitLayout& unit, int unit_index, uint64_t seed, double init_std, const Tensor& flat,
               int64_t begin = 0);

}  // namespace fsdp::model
