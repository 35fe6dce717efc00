// Turning a validated config into the parts a training run is made of: where this rank
// computes, the process groups the engine runs on, the data sources and loaders, the
// optimizer's schedule, and the initial parameters (the model's shape and the engine's
// options: config/model_options.h). Pure construction: nothing here trains, logs a step or
// writes a checkpoint.
#pragma once

#include <memory>

#include "fsdp/config/config.h"
#include "fsdp/data/loader.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"
#include "fsdp/optim/lr_schedule.h"
#include "fsdp/optim/optimizer.h"

namespace fsdp::train {

// Where this rank computes (train.device): cpu, or cuda:<local rank> (cuda:0 when the rank
// sees a single GPU, as under srun --gpus-per-task=1). auto is cuda when this build has
// the CUDA backend (not the emulator) and a GPU is visible. Errors name the key, the rank
// and what is visible.
Device resolve_device(const config::Config& cfg, const dist::WorldInfo& world);

// The engine's groups: the host groups, with the shard, replicate, tensor, expert and expert
// shard groups on NCCL when the model is on a GPU.
dist::ProcessGroups engine_groups(dist::ProcessGroups& host, Device device);

// The model this rank trains: training_model_config with the mesh's tensor-parallel and
// expert-parallel degrees. Every model runs under tensor parallelism on the CPU and on GPUs
// alike; QLoRA whose NF4 slices would cut a block of the whole weight is a config error
// naming parallel.tensor (exit 2); so are a model folder's expert count that parallel.expert
// does not divide, and expert parallelism with tensor parallelism or LoRA (not built yet).
model::LlamaConfig rank_model_config(const config::Config& cfg, const dist::ProcessGroups& groups);
// `m` (rank_model_config's) if it runs on `device`; what does not run on GPUs yet
// (moe.capacity_factor) is refused there naming its key.
model::LlamaConfig runs_on(const model::LlamaConfig& m, const config::Config& cfg, Device device);

// The training and validation samples and their loaders (this rank's share of every
// global batch: its data-parallel rank's, the mesh's, so the ranks of a tensor group read
// the same micro-batches). The validation side is null when there is none (a run that
// never evaluates needs none).
struct DataSources {
  std::shared_ptr<const data::SampleSource> train, val;
  std::unique_ptr<data::Loader> train_loader, val_loader;
  // Why there is no val source, when a run that never evaluates went on without one: the
  // error an evaluation then reports (which key to set, or what is wrong with the shards).
  std::string val_error;
};
DataSources make_data_sources(const config::Config& cfg, int64_t vocab_size, const dist::ProcessGroups& groups);

// The config as this world size runs it: with train.global_batch_size set,
// train.grad_accum_steps = global_batch_size / (micro_batch_size x data-parallel ranks),
// refused by name (exit 2) when that does not divide; otherwise `cfg` unchanged.
config::Config with_global_batch(const config::Config& cfg, int data_parallel_ranks);

optim::LrSchedule lr_schedule(const config::Config& cfg);
optim::AdamWConfig adamw_config(const config::Config& cfg);
// Fills every rank's shards for a fresh start: from model.init_from (a Hugging Face folder,
// each rank reading only its ranges) or from the seeded initialiser. `model` is the shape
// of `units` (a folder's tensors beyond it are refused: ckpt::check_unused_tensors).
void init_parameters(const config::Config& cfg, const model::LlamaConfig& model,
                     const std::vector<model::UnitLayout>& units, FsdpEngine& engine);

}  // namespace fsdp::train
