// Seeded parameter initialisation, shard-independent (param_init.h).
#include <algorithm>
#include <cmath>

#include "fsdp/core/random.h"
#include "fsdp/model/param_init.h"

namespace fsdp::model {

void init_unit(const UnitLayout& unit, int unit_index, uint64_t seed, double init_std, const Tensor& flat,
               int64_t begin) {
  check_dtype(flat, DType::F32, "flat");
  check_contiguous(flat, "flat");
  FSDP_CHECK(flat.device().is_cpu(), "init_unit: {} must be a CPU tensor", flat.str());
  const int64_t end = begin + flat.numel();
  FSDP_CHECK(begin >= 0, "init_unit: negative begin {}", begin);
  float* out = flat.data<float>();
  // An expert unit draws from its block's stream (UnitLayout::experts_of): one process's values.
  if (unit.experts_of >= 0) unit_index = unit.experts_of;
  const uint64_t key = mix_key(seed, 0x1417u, uint64_t(unit_index));
  // Adapters draw from a stream of their own: a seeded base and its adapters are independent.
  const uint64_t lora_key = mix_key(seed, 0x10a4au, uint64_t(unit_index));
  for (const ParamSlot& s : unit.params) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    // PEFT's lora_A: torch's kaiming_uniform_(a = sqrt(5)), i.e. uniform in +-1/sqrt(fan_in),
    // the whole parameter's fan-in (a row-parallel base's lora_A is a slice of its columns).
    const double bound = s.init_kind == 2 ? 1.0 / std::sqrt(double(s.whole_shape()[1])) : 0.0;
    for (int64_t i = lo; i < hi; ++i) {
      // Numbered as in one rank's layout, so a tensor-parallel slice draws the whole
      // parameter's values (ParamSlot::whole_index).
      const uint64_t at = uint64_t(s.whole_offset + s.whole_index(i - s.offset));
      switch (s.init_kind) {
        case 1: out[i - begin] = 1.0f; break;
        case 2: out[i - begin] = float(bound * (2.0 * uniform01(lora_key, at) - 1.0)); break;
        case 3: out[i - begin] = 0.0f; break;
        default: out[i - begin] = float(init_std * normal01(key, at));
      }
    }
  }
  // Padding past the unit's parameters (FSDP shards) is zero.
  for (int64_t i = std::max(begin, unit.numel); i < end; ++i) out[i - begin] = 0.0f;
}

}  // namespace fsdp::model
