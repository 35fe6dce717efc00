// Loading the LoRA / QLoRA golden fixtures (tests/golden/generate_peft.py) into a model in
// one process, shared by the CPU and CUDA golden tests: the base (tests/golden/llama_gqa_tiny,
// or its bitsandbytes 4-bit save llama_nf4_bnb) into the frozen bytes, a PEFT adapter folder
// into the trainable buffers, the golden batch into the activations.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "fsdp/ckpt/hf_frozen.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/model/local_params.h"
#include "golden_fixture.h"
#include "../cpu/test_util.h"

namespace fsdp::test {

// LoRA on every linear layer, r = 4, alpha = 8, no dropout: the fixtures' adapter.
inline model::PeftSpec fixture_peft(bool rslora, bool nf4, DType nf4_dtype = DType::F32) {
  model::PeftSpec p;
  p.lora.enabled = true;
  p.lora.rank = 4;
  p.lora.alpha = 8;
  p.lora.rslora = rslora;
  p.lora.targets = {"all-linear"};
  p.quantization = nf4 ? model::Quantization::Nf4 : model::Quantization::None;
  p.nf4_value_dtype = nf4_dtype;
  return p;
}

// Every unit's frozen bytes from the base folder, and (when `adapter` is not empty) its
// adapters from a PEFT folder, into host buffers; then moved to `device`, the adapters in
// `dtype` (the frozen bytes as they are: the model's layout stores dense weights in its dtype).
inline std::unique_ptr<model::LocalParams> lora_params(const model::Llama& llama, const std::string& base,
                                                       const std::string& adapter, DType dtype = DType::F32,
                                                       Device device = Device::cpu()) {
  model::LocalParams host(llama.units());
  const ckpt::SafetensorsFolder base_folder(base);
  ckpt::HfFrozenSource source(base_folder);
  for (int u = 0; u < host.num_units(); ++u) {
    const model::UnitLayout& unit = llama.units()[size_t(u)];
    if (!unit.frozen.empty()) model::fill_frozen_bytes(unit, host.frozen(u), 0, source);
  }
  if (!adapter.empty()) {
    const ckpt::SafetensorsFolder adapter_folder(adapter);
    for (int u = 0; u < host.num_units(); ++u)
      if (llama.units()[size_t(u)].numel > 0)
        ckpt::load_hf_unit(adapter_folder, llama.units()[size_t(u)], host.params(u));
  }
  auto out = std::make_unique<model::LocalParams>(llama.units(), dtype, device);
  for (int u = 0; u < host.num_units(); ++u) {
    out->params(u).copy_(host.params(u));
    if (out->frozen(u).defined()) out->frozen(u).copy_(host.frozen(u));
  }
  return out;
}

// Every adapter gradient in `params` (after a forward_backward) against `ref`'s
// grad.<PEFT name>, each within `tolerance`; returns the worst error and counts them.
inline double expect_adapter_gradients(const model::Llama& llama, model::LocalParams& params,
                                       const ckpt::SafetensorsFile& ref, double tolerance, int* count = nullptr) {
  double worst = 0;
  for (int u = 0; u < int(llama.units().size()); ++u) {
    const model::UnitLayout& unit = llama.units()[size_t(u)];
    for (const model::ParamSlot& p : unit.params) {
      const double err = rel_error(unit.view(params.grads(u), p.name), expected_tensor(ref, "grad." + p.hf_name));
      EXPECT_LT(err, tolerance) << p.hf_name;
      worst = std::max(worst, err);
      if (count != nullptr) ++*count;
    }
  }
  return worst;
}

}  // namespace fsdp::test
