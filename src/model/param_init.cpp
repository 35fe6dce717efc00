// Seeded parameter initialisation, shard-independent (param_init.h).
#include <algorithm>

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
  const uint64_t key = mix_key(seed, 0x1417u, uint64_t(unit_index));
  for (const ParamSlot& s : unit.params) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    for (int64_t i = lo; i < hi; ++i)
      out[i - begin] = s.init_kind == 1 ? 1.0f : float(init_std * normal01(key, uint64_t(i)));
  }
  // Padding past the unit's parameters (FSDP shards) is zero.
  for (int64_t i = std::max(begin, unit.numel); i < end; ++i) out[i - begin] = 0.0f;
}

}  // namespace fsdp::model
