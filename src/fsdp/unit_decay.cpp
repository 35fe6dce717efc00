#include "fsdp/fsdp/unit_decay.h"

namespace fsdp {

std::vector<optim::DecaySegment> decay_segments(const model::UnitLayout& unit) {
  std::vector<optim::DecaySegment> out;
  for (const auto& p : unit.params) {
    if (!out.empty() && out.back().decay == p.weight_decay && out.back().end == p.offset) {
      out.back().end = p.offset + p.numel;
    } else {
      out.push_back({p.offset, p.offset + p.numel, p.weight_decay});
    }
  }
  return out;
}

}  // namespace fsdp
