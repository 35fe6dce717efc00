// Which elements of a unit's flat buffer get weight decay, as the optimizer takes it. The
// model's layout says which parameters decay; the optimizer steps element ranges and knows
// nothing of parameters; the engine, which holds both, turns one into the other here.
#pragma once

#include <vector>

#include "fsdp/model/param_units.h"
#include "fsdp/optim/optimizer.h"

namespace fsdp {

// Maximal runs of parameters that share a decay flag, in flat-buffer order.
std::vector<optim::DecaySegment> decay_segments(const model::UnitLayout& unit);

}  // namespace fsdp
