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
// Device (train.device): on the CPU everything is host tensors and MPI. On CUDA each rank
// takes one GPU (its local rank's, or the only one it sees under --gpus-per-task): the
// model, activations and the engine's shards live there, the shard and replicate groups
// are NCCL communicators (dist/nccl.h), batches go up from page-locked host buffers, and
// the host waits for the GPU once for the step's losses (all micro-batches at once) and
// twice for the gradient norm. Compute in train.dtype: float32, bfloat16, or float16 with dynamic
// loss scaling (optim/loss_scaler.h).
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
#include <optional>
#include <vector>

#include "fsdp/ckpt/checkpoint.h"
#include "fsdp/config/config.h"
#include "fsdp/data/loader.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/decoder.h"
#include "fsdp/optim/loss_scaler.h"
#include "fsdp/optim/lr_schedule.h"
#include "fsdp/optim/optimizer.h"
#include "fsdp/train/metrics.h"

namespace fsdp::train {

// The model shape a config asks for: the preset, or config.json of model.init_from, with
// the config's explicit shape keys applied on top (an override that contradicts an
// init_from folder is an error naming the key).
model::LlamaConfig resolve_model_config(const config::ModelConfig& m);

// fsdp.* as engine options for a model computing in train.dtype on `device`.
FsdpOptions fsdp_options(const config::Config& cfg, Device device = Device::cpu());

// Where this rank computes (train.device): cpu, or cuda:<local rank> (cuda:0 when the rank
// sees a single GPU, as under srun --gpus-per-task=1). auto is cuda when this build has
// the CUDA backend (not the emulator) and a GPU is visible. Errors name the key, the rank
// and what is visible.
Device resolve_device(const config::Config& cfg, const dist::WorldInfo& world);

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
  Device device() const { return device_; }
  const optim::DynamicLossScaler& loss_scaler() const { return scaler_; }
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
  void log_device() const;
  // The loader's next micro-batch into act_.ids / act_.targets (through the page-locked
  // staging buffers when the model is on a GPU).
  void load_micro_batch(data::Loader& loader, int64_t index);

  config::Config cfg_;
  dist::ProcessGroups& groups_;   // host groups (MPI or local): world, checkpoints
  Device device_;
  dist::ProcessGroups engine_groups_;  // the engine's: groups_, with NCCL shard/replicate on a GPU
  model::Llama model_;
  FsdpEngine engine_;
  model::LlamaActivations act_;
  Tensor ids_host_, targets_host_;  // [accum, N] page-locked batch staging (GPU runs only)
  Tensor step_losses_;              // [accum, N] the step's per-token losses on the GPU
  optim::DynamicLossScaler scaler_;
  std::optional<double> peak_flops_;  // the GPU's bf16 peak, for MFU
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
