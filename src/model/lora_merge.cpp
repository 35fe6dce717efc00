// Merging a LoRA unit into a plain one; see lora_merge.h. The product B A is one float32
// GEMM into a scratch, added to W with the scale: the weight PEFT's merge computes, up to
// float32 summation order.
#include "fsdp/model/lora_merge.h"

#include "fsdp/core/error.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/ops/matmul.h"

namespace fsdp::model {

void merge_lora_unit(const UnitLayout& lora, const Tensor& frozen, const Tensor& adapters, const UnitLayout& plain,
                     const Tensor& out) {
  check_dtype(out, DType::F32, "out");
  FSDP_CHECK(out.device().is_cpu() && out.is_contiguous() && out.numel() >= plain.numel,
             "merge_lora_unit: {} for unit '{}' of {} elements", out.str(), plain.name, plain.numel);
  for (const FrozenSlot& f : lora.frozen) {
    const ParamSlot& p = plain.slot(f.name);
    const Tensor w = out.narrow(0, p.offset, p.numel);
    frozen_slot_values(frozen, f, w);
    if (!lora.has(f.name + ".lora_A")) continue;
    const ParamSlot& a = lora.slot(f.name + ".lora_A");
    const ParamSlot& b = lora.slot(f.name + ".lora_B");
    const Tensor A = adapters.narrow(0, a.offset, a.numel).reshape(a.shape);
    const Tensor B = adapters.narrow(0, b.offset, b.numel).reshape(b.shape);
    // W += s * B A, the GEMM's beta adding onto W in place.
    matmul(B, A, w.reshape(p.shape), false, false, lora.lora_scale, 1.0);
  }
}

}  // namespace fsdp::model
