// A finished model for inference (`fsdp_train generate`): every unit's full float32
// weights on the host, from any of the places a trained or imported model lives, then moved
// to the device and dtype generation runs in.
//   a Hugging Face folder    config.json + *.safetensors (ckpt/hf_import.h); with an adapter,
//                            a PEFT folder merged into it (its base; bitsandbytes 4-bit bases
//                            are dequantized)
//   an fsdp_train checkpoint step_<N>/, or a checkpoint.dir whose newest verified one is used
//                            (broken ones skipped as resume does); the fp32 master weights,
//                            whatever rank count saved them; a LoRA checkpoint's adapters
//                            merged into the base it names
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fsdp/core/device.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"

namespace fsdp::train {

// Every unit's full parameters and nothing else: inference computes no gradients.
class InferenceParams final : public model::ParamProvider {
 public:
  explicit InferenceParams(const std::vector<model::UnitLayout>& units);
  Tensor params(int unit) override { return params_[size_t(unit)]; }
  Tensor grads(int) override;
  // Converts every unit to `dtype` on `device` (the weights load as float32 on the host).
  void move_to(Device device, DType dtype);

 private:
  std::vector<Tensor> params_;
};

struct InferenceModel {
  model::LlamaConfig config;
  std::unique_ptr<InferenceParams> params;
  // A mixture of experts trained with auxiliary-loss-free balancing: its routing biases
  // ([layers][experts], from the checkpoint's manifest), to route as training did; empty
  // for everything else (a Hugging Face folder has none).
  std::vector<std::vector<float>> router_bias;
  std::string kind;  // what was loaded, for the log
};

// Loads the model at `path` (generate's --checkpoint), `adapter` (--adapter) merged into it
// when not empty; `base` (--base) is a LoRA checkpoint's base folder when it is no longer
// where the checkpoint records it. Errors name the flag and what was expected there.
InferenceModel load_inference_model(const std::string& path, const std::string& adapter,
                                    const std::string& base = "");

// generate's --device (auto, cpu or cuda) as a Device: the GPU of this process (cuda:0;
// CUDA_VISIBLE_DEVICES picks which), or the CPU.
Device resolve_inference_device(const std::string& want);

}  // namespace fsdp::train
