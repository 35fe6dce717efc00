// The training step and the run loop: micro-batches, gradient accumulation, clipping,
// AdamW, the LR schedule, evaluation, on any number of ranks, reported through obs/ (the
// step line, metrics.jsonl, traces). The parts come from the config through
// train/setup.h; checkpoints are the business of train/checkpoint_policy.h; the parameters
// live in the FSDP engine (with one rank it holds every unit whole and the loop is plain
// single-process training).
//
// Global batch and sample order: step s (1-based) trains on the global positions
// [(s-1)*G, s*G), G = micro_batch_size * grad_accum_steps * D, D the data-parallel ranks
// (the world size / parallel.tensor: the ranks of a tensor group read the same
// micro-batches); data-parallel rank r's micro-batch a holds positions
// (s-1)*G + (a*D + r)*micro .. + micro (data::Loader, which maps positions to samples
// through a seeded per-epoch shuffle), so the global order is the same for every layout.
//
// Note [Token-weighted loss]
// The loss reported and differentiated is the sum of the per-token losses over the trained
// targets of the whole global batch divided by their number (every micro-batch, every
// data-parallel rank), so it is the same for any micro-batch split, world size or tensor
// degree, also when examples train very different numbers of tokens (SFT masks, padded
// rows). A mean per micro-batch averaged over micro-batches (PyTorch's old
// gradient-accumulation bug, fixed in transformers by num_items_in_batch) weights a token of
// a short micro-batch more than one of a long one. The count must be known before the first
// backward: each step stages its micro-batches first (the loader's next() into [accum, N]
// host rows), counts the targets that are not ignored, and all-reduces that count once (a
// float64 scalar over the world, divided by the tensor degree: a tensor group's ranks hold
// the same micro-batches; skipped when the data has no mask, where every target trains:
// global_batch x seq_len). Scaling afterwards instead would save the collective but scale a
// mixture of experts' router-loss gradients, which share the gradient buffers, by the same
// factor, and float16's loss scaling would see unnormalised magnitudes. A step without
// trained targets has zero gradients.
//
// Device (train.device): on the CPU everything is host tensors and MPI. On CUDA each rank
// takes one GPU (its local rank's, or the only one it sees under --gpus-per-task): the
// model, activations and the engine's shards live there, the shard and replicate groups
// are NCCL communicators (dist/nccl.h), batches go up from page-locked host buffers, and
// the host waits for the GPU once for the step's losses (all micro-batches at once) and
// twice for the gradient norm. Compute in train.dtype: float32, bfloat16, or float16 with dynamic
// loss scaling (optim/loss_scaler.h).
//
// Checkpoints: every checkpoint.interval steps and at the end; on start, checkpoint.resume
// picks one and restores the shards, AdamW moments, step, token and sample counters, so
// the resumed run continues the same loss curve bit for bit (with the same world size and
// strategy; on another world size, within fp32 reduction order). A preemption signal
// (train/preemption.h) makes run() finish its step, save and return kExitPreempted; a
// diverged run (train/divergence.h) stops with kExitError and no checkpoint left that would
// resume into the divergence. Ranks
// agree on "stop now" and "every background write is done" through the per-step votes
// (train/step_votes.h), which ride on the loss all-reduce.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/expert_group.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/model/decoder.h"
#include "fsdp/obs/expert_load.h"
#include "fsdp/obs/metrics.h"
#include "fsdp/optim/loss_scaler.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/train/checkpoint_policy.h"
#include "fsdp/train/setup.h"
#include "fsdp/train/step_votes.h"

namespace fsdp::train {

// What a Trainer is made for: a training run saves checkpoints, so it claims
// checkpoint.dir at start-up (Note [Run ownership]); an evaluation only reads one.
enum class TrainerPurpose { Train, Evaluate };

class Trainer {
 public:
  // Runs `cfg` as this world size does: train.global_batch_size decides the accumulation
  // (setup.h's with_global_batch); config() is that effective config.
  Trainer(const config::Config& cfg, dist::ProcessGroups& groups, TrainerPurpose purpose = TrainerPurpose::Train);

  // One optimizer step over train.grad_accum_steps micro-batches on every rank.
  obs::StepMetrics train_step();
  // Mean loss over the trained targets of `batches` validation steps of micro_batch_size
  // samples per rank (a held-out synthetic stream), or with batches 0 over every sample of the
  // split once (eval.batches: 0; the last step's rows past the split are left out). Every
  // rank must call it.
  double evaluate(int batches);
  struct EvalResult {
    double loss = 0;             // the sum of the per-token losses over trained targets / their count
    int64_t trained_targets = 0; // every rank's (an SFT split's mask leaves the prompts out)
    int64_t targets = 0;         // every target position read, trained or not
    int64_t samples = 0;         // rows read (windows, or examples without packing)
  };
  EvalResult evaluate_split(int batches);
  // The whole run: logs (rank 0), metrics.jsonl, periodic eval; returns the exit code.
  int run();

  int64_t step() const { return step_; }
  // The checkpoint this run resumed from ("" for a fresh start).
  const std::string& resumed_from() const { return checkpoints_.resumed_from(); }
  // This run's id (in every checkpoint manifest and metrics.jsonl line).
  const std::string& run_id() const { return checkpoints_.run_id(); }
  // Collective: writes a checkpoint of the current state (synchronously, or starts an
  // asynchronous one); returns its stats. run() calls it; tests may too.
  ckpt::SaveStats save_checkpoint();
  // Collective: waits for an asynchronous save and commits it.
  void finish_checkpoint();
  const model::Llama& model() const { return model_; }
  // The last micro-batch's activations (its routing records, for tests).
  const model::LlamaActivations& activations() const { return act_; }
  FsdpEngine& engine() { return engine_; }
  Device device() const { return device_; }
  const optim::DynamicLossScaler& loss_scaler() const { return scaler_; }
  // The start-up memory plan of this rank (what `fsdp_train plan` prints).
  const plan::MemoryPlan& memory_plan() const { return memory_plan_; }
  const config::Config& config() const { return cfg_; }

 private:
  struct Effective {};  // the constructor that takes the effective config
  Trainer(Effective, const config::Config& cfg, dist::ProcessGroups& groups, TrainerPurpose purpose);
  uint64_t comm_bytes() const;
  double comm_wait_seconds() const;
  std::vector<const dist::Communicator*> expert_comms() const;
  // Sums (loss, tokens) and this rank's votes over the world; the same on every rank.
  StepVotes all_reduce_votes(model::LossSum local);
  // The state a checkpoint holds besides tensors, and its restoration.
  ckpt::TrainState train_state() const;
  void restore(const std::string& path);
  // Forward and backward of every micro-batch of a step; this rank's loss sum.
  model::LossSum accumulate_gradients(double grad_scale, double router_scale);
  // The loader's next micro-batch into act_.ids / act_.targets (through the page-locked
  // staging buffers when the model is on a GPU): evaluation's. keep_rows >= 0 masks the
  // targets of the rows from it on (evaluating a split whole).
  void load_micro_batch(data::Loader& loader, int64_t index, int64_t keep_rows = -1);
  // A training step's micro-batches into the staging rows; the global number of trained
  // targets (Note [Token-weighted loss]).
  int64_t stage_step_batches();
  // Staging row `index` into act_.ids / act_.targets.
  void upload_micro_batch(int64_t index);
  void log_run_start() const;
  // Throws unless the state at step_ is committed to disk (`which` names the save).
  void check_final_checkpoint(const char* which) const;
  // run()'s steps, evaluations, logging and checkpoints; throws Diverged (divergence.h).
  int train_loop(obs::MetricsWriter* metrics);
  void log_lora() const;
  void write_effective_config() const;
  void log_device() const;

  config::Config cfg_;
  dist::ProcessGroups& groups_;   // host groups (MPI or local): world, checkpoints
  Device device_;
  plan::MemoryPlan memory_plan_;  // checked before anything below allocates (plan/memory_check.h)
  dist::ProcessGroups engine_groups_;  // the engine's: groups_, with NCCL shard/replicate/tensor/expert groups on a GPU
  CommTensorGroup tensor_group_;       // the model's tensor-parallel group (engine_groups_.tensor)
  // The model's expert group (engine_groups_.expert: NCCL on a GPU; null when the groups
  // have none).
  std::unique_ptr<CommExpertGroup> expert_group_;
  model::Llama model_;
  FsdpEngine engine_;
  model::LlamaActivations act_;
  Tensor ids_host_, targets_host_;  // [accum, N] the step's batches (page-locked on a GPU)
  Tensor doc_start_host_;           // [accum, N] their document starts, when the loader has documents
  Tensor count_buf_;                // [1] float64: the step's trained targets, all-reduced
  Tensor step_losses_;              // [accum, N] the step's per-token losses on the GPU
  optim::DynamicLossScaler scaler_;
  std::optional<double> peak_flops_;  // the GPU's bf16 peak, for MFU
  DataSources data_;
  optim::LrSchedule schedule_;
  optim::AdamWConfig adamw_;
  CheckpointPolicy checkpoints_;
  std::optional<obs::ExpertLoad> expert_load_;  // a mixture of experts only
  Tensor votes_buf_;      // [StepVotes::kSlots] float64, reused every step
  StepVotes last_votes_;  // the last all-reduce's sums
  double flops_per_token_ = 0;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t samples_seen_ = 0;
};

}  // namespace fsdp::train
