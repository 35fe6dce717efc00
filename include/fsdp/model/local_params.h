// Every unit's full parameters, gradients and frozen bytes (LoRA's base, when the layout
// has one) in this process, zero-initialised, on one
// device in one dtype (float32 on the host unless asked otherwise; the model's compute
// dtype and device when it runs elsewhere): the simplest ParamProvider, for tests that
// drive the model directly (the golden test). Training always goes through the FSDP
// engine, which on one rank does the same thing.
#pragma once

#include <vector>

#include "fsdp/model/param_provider.h"
#include "fsdp/model/param_units.h"

namespace fsdp::model {

class LocalParams final : public ParamProvider {
 public:
  explicit LocalParams(const std::vector<UnitLayout>& units, DType dtype = DType::F32,
                       Device device = Device::cpu()) {
    for (const auto& u : units) {
      params_.push_back(Tensor::zeros({u.numel}, dtype, device));
      grads_.push_back(Tensor::zeros({u.numel}, dtype, device));
      frozen_.push_back(u.frozen.empty() ? Tensor() : Tensor::zeros({u.frozen_bytes}, DType::U8, device));
    }
  }
  Tensor params(int unit) override { return params_[unit]; }
  Tensor grads(int unit) override { return grads_[unit]; }
  Tensor frozen(int unit) override { return frozen_[unit]; }
  int num_units() const { return int(params_.size()); }

 private:
  std::vector<Tensor> params_, grads_, frozen_;
};

}  // namespace fsdp::model
