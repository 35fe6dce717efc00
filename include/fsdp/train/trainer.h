// The training loop: micro-batches, gradient accumulation, clipping, AdamW, the LR
// schedule, evaluation, step logging and metrics.jsonl, on any number of ranks. The
// parameters live in the FSDP engine; with one rank it holds every unit whole and the
// loop is plain single-process training.
//
// Global batch and sample order: step s (1-based) trains on the global positions
// [(s-1)*G, s*G), G = micro_batch_size * grad_accum_steps * world_size; rank r's
// micro-batch a holds positions (s-1)*G + (a*world + r)*micro .. + micro (data::Loader,
// which maps positions to samples through a seeded per-epoch shuffle). Gradients are
// scaled by 1 / (tokens in the global batch), so the summed gradient is the global mean
// whatever the world size or accumulation.
#pragma once

#include <memory>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/data/loader.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/llama.h"
#include "fsdp/optim/lr_schedule.h"
#include "fsdp/optim/optimizer.h"
#include "fsdp/train/metrics.h"

namespace fsdp::train {

// The model shape a config asks for: the preset, or config.json of model.init_from, with
// the config's explicit shape keys applied on top (an override that contradicts an
// init_from folder is an error naming the key).
model::LlamaConfig resolve_model_config(const config::ModelConfig& m);

// fsdp.* as engine options.
FsdpOptions fsdp_options(const config::Config& cfg);

class Trainer {
 public:
  Trainer(const config::Config& cfg, dist::ProcessGroups& groups);

  // One optimizer step over train.grad_accum_steps micro-batches on every rank.
  StepMetrics train_step();
  // Mean loss over `batches` validation steps of micro_batch_size samples per rank (a
  // held-out synthetic stream). Every rank must call it.
  double evaluate(int batches);
  // The whole run: logs (rank 0), metrics.jsonl, periodic eval; returns the exit code.
  int run();

  int64_t step() const { return step_; }
  const model::Llama& model() const { return model_; }
  FsdpEngine& engine() { return engine_; }
  const config::Config& config() const { return cfg_; }

 private:
  uint64_t comm_bytes() const;
  double comm_wait_seconds() const;
  // Sums (loss, tokens) over the world; the same value on every rank.
  model::LossSum all_reduce_loss(model::LossSum local);

  config::Config cfg_;
  dist::ProcessGroups& groups_;
  model::Llama model_;
  FsdpEngine engine_;
  model::LlamaActivations act_;
  std::shared_ptr<const data::SampleSource> train_source_, val_source_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_;
  optim::LrSchedule schedule_;
  optim::AdamWConfig adamw_;
  Tensor loss_buf_;  // [2] float64: loss sum, tokens
  double flops_per_token_ = 0;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
};

}  // namespace fsdp::train
