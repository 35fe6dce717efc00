// The training loop: micro-batches, gradient accumulation, clipping, AdamW, the LR
// schedule, evaluation, step logging and metrics.jsonl. Single process for now; the
// parameters live in LocalParams (one fp32 flat buffer per unit with its gradient and
// AdamW moments), the layout the FSDP engine shards.
#pragma once

#include <memory>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/data/synthetic.h"
#include "fsdp/model/llama.h"
#include "fsdp/optim/lr_schedule.h"
#include "fsdp/optim/optimizer.h"
#include "fsdp/train/metrics.h"

namespace fsdp::train {

// The model shape a config asks for: the preset, or config.json of model.init_from, with
// the config's explicit shape keys applied on top (an override that contradicts an
// init_from folder is an error naming the key).
model::LlamaConfig resolve_model_config(const config::ModelConfig& m);

// Every unit's full parameters, gradients and AdamW moments, in float32.
class LocalParams final : public model::ParamProvider {
 public:
  explicit LocalParams(const std::vector<model::UnitLayout>& units);
  Tensor params(int unit) override { return params_[unit]; }
  Tensor grads(int unit) override { return grads_[unit]; }
  const Tensor& exp_avg(int unit) const { return exp_avg_[unit]; }
  const Tensor& exp_avg_sq(int unit) const { return exp_avg_sq_[unit]; }
  int num_units() const { return int(params_.size()); }

 private:
  std::vector<Tensor> params_, grads_, exp_avg_, exp_avg_sq_;
};

class Trainer {
 public:
  explicit Trainer(const config::Config& cfg);

  // One optimizer step over train.grad_accum_steps micro-batches.
  StepMetrics train_step();
  // Mean loss over `batches` validation micro-batches (a held-out synthetic stream).
  double evaluate(int batches);
  // The whole run: logs, metrics.jsonl, periodic eval; returns the process exit code.
  int run();

  int64_t step() const { return step_; }
  const model::Llama& model() const { return model_; }
  LocalParams& params() { return params_; }
  const config::Config& config() const { return cfg_; }

 private:
  void load_micro_batch(int64_t first_sample, bool validation);

  config::Config cfg_;
  model::Llama model_;
  LocalParams params_;
  model::LlamaActivations act_;
  data::SyntheticSource train_data_, val_data_;
  optim::LrSchedule schedule_;
  optim::AdamWConfig adamw_;
  std::vector<std::vector<optim::DecaySegment>> segments_;
  double flops_per_token_ = 0;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
};

}  // namespace fsdp::train
