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
//
// Checkpoints (ckpt/checkpoint.h): every checkpoint.interval steps and at the end; on
// start, checkpoint.resume picks one (auto: the newest complete one) and restores the
// shards, AdamW moments, step, token and sample counters, so the resumed run continues
// the same loss curve bit for bit (with the same world size and strategy; on another
// world size, within fp32 reduction order). A preemption signal (train/preemption.h)
// makes run() finish its step, save and return kExitPreempted. Ranks agree on "stop now"
// and "every background write is done" through the per-step loss all-reduce, so neither
// costs a collective of its own.
#pragma once

#include <memory>
#include <vector>

#include "fsdp/ckpt/checkpoint.h"
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
  // The checkpoint this run resumed from ("" for a fresh start).
  const std::string& resumed_from() const { return resumed_from_; }
  // Collective: writes a checkpoint of the current state (synchronously, or starts an
  // asynchronous one); returns its stats. run() calls it; tests may too.
  ckpt::SaveStats save_checkpoint();
  // Collective: waits for an asynchronous save and commits it.
  void finish_checkpoint();
  const model::Llama& model() const { return model_; }
  FsdpEngine& engine() { return engine_; }
  const config::Config& config() const { return cfg_; }

 private:
  uint64_t comm_bytes() const;
  double comm_wait_seconds() const;
  // Sums (loss, tokens) over the world; the same value on every rank. Also sums the
  // ranks that received a preemption signal and the ranks still writing a checkpoint.
  model::LossSum all_reduce_loss(model::LossSum local);
  std::string resume_path();
  void resume(const std::string& path);
  // Commits an asynchronous save once every rank's write is done (collective, same step).
  void maybe_commit_checkpoint();
  void log_save(const ckpt::SaveStats& s, bool committed) const;

  config::Config cfg_;
  dist::ProcessGroups& groups_;
  model::Llama model_;
  FsdpEngine engine_;
  model::LlamaActivations act_;
  std::shared_ptr<const data::SampleSource> train_source_, val_source_;
  std::unique_ptr<data::Loader> train_loader_, val_loader_;
  optim::LrSchedule schedule_;
  optim::AdamWConfig adamw_;
  Tensor loss_buf_;  // [4] float64: loss sum, tokens, ranks signalled, ranks writing
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  std::string resumed_from_;
  int64_t samples_seen_ = 0;
  int64_t last_saved_step_ = -1;
  int stop_votes_ = 0;      // ranks that received a preemption signal (last all-reduce)
  int busy_writers_ = 0;    // ranks still writing a checkpoint (last all-reduce)
  double flops_per_token_ = 0;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
};

}  // namespace fsdp::train
