// From config to the parts of a training run; see setup.h.
#include "fsdp/train/setup.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/config/model_options.h"
#include "fsdp/data/packing.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/data/synthetic_samples.h"
#include "fsdp/model/expert_parallel.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/peft.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_libraries.h"
#endif
#if defined(FSDP_WITH_NCCL)
#include "fsdp/dist/nccl.h"
#endif

namespace fsdp::train {

namespace {

optim::LrDecay to_decay(config::LrSchedule s) {
  switch (s) {
    case config::LrSchedule::Cosine: return optim::LrDecay::Cosine;
    case config::LrSchedule::Linear: return optim::LrDecay::Linear;
    case config::LrSchedule::Constant: return optim::LrDecay::Constant;
  }
  return optim::LrDecay::Cosine;
}

// Synthetic validation samples come from the same chain as training (same seed) but
// from sample indices no training step reaches.
constexpr int64_t kValidationFirstSample = int64_t(1) << 60;

class OffsetSamples final : public data::SampleSource {
 public:
  OffsetSamples(std::shared_ptr<const data::SampleSource> base, int64_t offset, int64_t count)
      : base_(std::move(base)), offset_(offset), count_(count) {}
  int64_t num_samples() const override { return count_; }
  int64_t seq_len() const override { return base_->seq_len(); }
  void read_sample(int64_t index, int32_t* window) const override { base_->read_sample(offset_ + index, window); }

 private:
  std::shared_ptr<const data::SampleSource> base_;
  int64_t offset_, count_;
};

// The manifest `fsdp_train prepare` writes beside the shards: its vocabulary must be the
// model's (a different tokenizer would train on meaningless ids).
void check_manifest_vocab(const std::string& dir, int64_t model_vocab) {
  const auto m = data::read_shard_manifest(dir);
  if (!m || !m->vocab_size) return;
  // The config's error (exit 2): nothing ran, and model.vocab_size or data.path is to change.
  if (*m->vocab_size != model_vocab) {
    throw config::ConfigError(fmt::format(
        "{}: the tokenizer's vocab_size {} differs from model.vocab_size {} (prepare the data with the model's "
        "tokenizer, or set model.vocab_size)",
        (std::filesystem::path(dir) / "manifest.json").string(), *m->vocab_size, model_vocab));
  }
}

// data.document_masking splits windows after the EOS id the manifest beside the shards
// records (the tokenizer prepare used); without one there is nothing to split at.
int32_t document_eos(const config::Config& cfg, int64_t vocab) {
  const auto m = data::read_shard_manifest(cfg.data.path);
  const std::string manifest = (std::filesystem::path(cfg.data.path) / "manifest.json").string();
  if (!m)
    config::fail_key(cfg, "data.document_masking",
                     fmt::format("is true, but {} does not exist: the EOS id to split documents at comes from the "
                                 "manifest `fsdp_train prepare` writes; prepare the data with a tokenizer, or set "
                                 "data.document_masking: false",
                                 manifest));
  if (!m->eos_id || *m->eos_id < 0 || *m->eos_id >= vocab)
    config::fail_key(cfg, "data.document_masking",
                     fmt::format("is true, but {} records no EOS id ({}): prepare the data with a tokenizer that has "
                                 "an EOS token, or set data.document_masking: false",
                                 manifest, m->eos_id ? fmt::format("eos_id {}", *m->eos_id) : "eos_id null"));
  return int32_t(*m->eos_id);
}

// A relative path resolves from the working directory: say which, since the repository's
// configs name paths relative to its root.
std::string resolved(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::path(path).is_absolute()) return "";
  const auto cwd = std::filesystem::current_path(ec);
  if (ec) return "";
  return fmt::format(" (relative to the working directory {}: {})", cwd.string(), (cwd / path).lexically_normal().string());
}

// data.path (or data.val_path) must name token shards that are there: a missing one is the
// config's error (exit 2), reported before the run builds anything on it.
void check_shards_exist(const config::Config& cfg, const std::string& key, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) || std::filesystem::exists(path + ".idx", ec)) return;
  const bool demo = path.find("data/demo") != std::string::npos;
  config::fail_key(
      cfg, key,
      fmt::format("is '{}', which is neither a folder of token shards nor a shard prefix ({}.idx){}; {}", path, path,
                  resolved(path),
                  demo ? "make the demo corpus with `bash scripts/demo_corpus.sh` (or `bash scripts/demo.sh`), or run "
                         "from the repository root"
                       : fmt::format("make it with `fsdp_train prepare --tokenizer tokenizer.model --output {} "
                                     "<text or jsonl files>`",
                                     path)));
}

#if defined(FSDP_WITH_CUDA)
// cuBLASLt for every GPU run, NCCL when there are several ranks (fsdp/core/cuda_libraries.h):
// found and loaded before anything runs, and said in one line; a missing one stops the run
// here with that line (exit 2), not at the first GEMM.
void require_cuda_libraries(const config::Config& cfg, const dist::WorldInfo& world) {
  const std::vector<cuda::FoundLibrary>& libs = cuda::process_libraries();
  for (const cuda::FoundLibrary& l : libs) {
    if (!l.found() && (l.spec.id == cuda::CudaLibrary::CublasLt || world.size > 1))
      config::fail_key(cfg, "train.device",
                       fmt::format("{} needs {} on rank {} ({}): {}", cfg.train.device == "auto" ? "auto (a GPU)" : "cuda",
                                   l.spec.what, world.rank, world.hostname, cuda::process_libraries_line()));
  }
  if (world.rank == 0) spdlog::info("{}", cuda::process_libraries_line());
}
#endif

}  // namespace

config::Config with_global_batch(const config::Config& cfg, int data_parallel_ranks) {
  const int64_t g = cfg.train.global_batch_size;
  if (g == 0) return cfg;
  const int64_t per_step = int64_t(cfg.train.micro_batch_size) * data_parallel_ranks;
  if (g % per_step != 0) {
    config::fail_key(cfg, "train.global_batch_size",
                     fmt::format("{} is not a multiple of train.micro_batch_size {} x {} data-parallel rank(s) = {}: "
                                 "set a multiple of {}, or another micro_batch_size",
                                 g, cfg.train.micro_batch_size, data_parallel_ranks, per_step, per_step));
  }
  config::Config out = cfg;
  out.train.grad_accum_steps = int(g / per_step);
  if (cfg.origins.where.count("train.grad_accum_steps") != 0 && cfg.train.grad_accum_steps != out.train.grad_accum_steps)
    spdlog::warn("train.grad_accum_steps {} ({}) is not used: train.global_batch_size {} over {} rank(s) x "
                 "micro_batch_size {} makes it {}",
                 cfg.train.grad_accum_steps, cfg.origins.where.at("train.grad_accum_steps"), g, data_parallel_ranks,
                 cfg.train.micro_batch_size, out.train.grad_accum_steps);
  return out;
}

Device resolve_device(const config::Config& cfg, const dist::WorldInfo& world) {
  const std::string& want = cfg.train.device;
  Device d = Device::cpu();
#if defined(FSDP_WITH_CUDA)
  const int visible = cuda::device_count();
  const bool use_cuda = want == "cuda" || (want == "auto" && cuda::real_gpu_visible());
  if (use_cuda) {
    if (visible == 0) {
      config::fail_key(cfg, "train.device",
                       fmt::format("is cuda but rank {} on {} sees no CUDA device (CUDA_VISIBLE_DEVICES='{}'); set "
                                   "train.device: cpu, or run where the GPUs are",
                                   world.rank, world.hostname,
                                   std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : ""));
    }
    const int index = visible == 1 ? 0 : world.local_rank;
    FSDP_CHECK(index < visible,
               "train.device is cuda: rank {} is local rank {} of {} on {} but only {} GPU(s) are visible; one rank "
               "per GPU (srun --ntasks-per-node={})",
               world.rank, world.local_rank, world.local_size, world.hostname, visible, visible);
    d = Device::cuda(index);
    require_cuda_libraries(cfg, world);
  }
#else
  if (want == "cuda") {
    config::fail_key(cfg, "train.device",
                     "is cuda but this fsdp_train was built without the CUDA backend (rebuild where nvcc is found: "
                     "scripts/build.sh -DFSDP_CUDA=ON), or set train.device: cpu");
  }
#endif
  // The store carries a GPU run's few host collectives; the CPU backend's parameters and
  // gradients would crawl through it. MPI is the CPU backend's transport.
  if (d.is_cpu() && world.size > 1 && world.bootstrap != "MPI") {
    config::fail_key(cfg, "train.device",
                     fmt::format("puts rank {} on the CPU, and the CPU backend across {} ranks needs MPI: launch with "
                                 "`mpirun -np {}` or `srun --mpi=pmix` ({} started these ranks without MPI, which "
                                 "only GPU runs support)",
                                 world.rank, world.size, world.size, world.launcher));
  }
  if (d.is_cpu() && cfg.train.dtype != DType::F32) {
    config::fail_key(cfg, "train.dtype",
                     fmt::format("is {}, which needs train.device cuda (a GPU); this rank computes on the CPU, in "
                                 "float32 (fsdp.param_dtype: bfloat16 still halves the all-gathers)",
                                 dtype_name(cfg.train.dtype)));
  }
  return d;
}

dist::ProcessGroups engine_groups(dist::ProcessGroups& host, Device device) {
  if (device.is_cpu()) return host;
#if defined(FSDP_WITH_NCCL)
  return dist::make_nccl_process_groups(host, device.index);
#else
  // Single-rank groups copy on the device without NCCL; more ranks need it.
  FSDP_CHECK(host.shard->size() == 1 && host.replicate->size() == 1,
             "train.device cuda with {} ranks needs NCCL, and this build has none (rebuild with NCCL installed)",
             host.world->size());
  return host;
#endif
}

model::LlamaConfig runs_on(const model::LlamaConfig& m, const config::Config& cfg, Device device) {
  if (device.is_cpu()) return m;
  // The drop runs on the host over the routing (model/moe_capacity.h): the CPU backend's.
  if (m.capacity_factor > 0)
    config::fail_key(cfg, "moe.capacity_factor",
                     fmt::format("is {}, but token dropping on GPUs (train.device: cuda) is not built yet: set "
                                 "moe.capacity_factor: 0 (dropless)",
                                 m.capacity_factor));
  return m;
}

model::LlamaConfig rank_model_config(const config::Config& cfg, const dist::ProcessGroups& groups) {
  model::LlamaConfig m = config::training_model_config(cfg);
  config::warn_if_preset_unused(cfg, m);
  m.tensor_parallel = groups.mesh.shape().tensor;
  m.expert_parallel = groups.mesh.shape().expert;
  if (m.expert_parallel > 1) {
    // The config checked what it knows; a model folder's config.json speaks only now.
    if (const auto why = model::expert_parallel_problem(m, m.expert_parallel))
      config::fail_key(cfg, "parallel.expert", fmt::format("{} ({})", *why, cfg.model.init_from.empty() ? "the model keys" : cfg.model.init_from + "/config.json"));
    // GPUs too (Note [Expert counts on a GPU] in moe_dispatch.h), LoRA (Note [LoRA on
    // expert-parallel experts] in mlp_moe.h), and with parallel.tensor the experts are
    // tensor-split too (Note [Experts under expert and tensor parallelism] in moe_dispatch.h).
    // Not built yet: LoRA under both (the checkpoint writer places E x T slices by the plain
    // model's slots, which hold no adapter).
    if (cfg.lora.enabled && m.tensor_parallel > 1)
      config::fail_key(cfg, "parallel.expert",
                       fmt::format("is {} with parallel.tensor {} and lora.enabled, but LoRA under expert and tensor "
                                   "parallelism together is not built yet: set parallel.expert or parallel.tensor to 1",
                                   m.expert_parallel, m.tensor_parallel));
  }
  if (m.tensor_parallel == 1) return m;
  if (cfg.lora.enabled && cfg.model.quantization == "nf4") {
    // QLoRA: each rank keeps its slice of the weights quantized whole (See Note [LoRA under
    // tensor parallelism] in peft_units.cpp), which needs the slices made of whole blocks.
    const std::string refusal = model::nf4_split_refusal(m);
    if (!refusal.empty())
      config::fail_key(cfg, "parallel.tensor",
                       fmt::format("is {} with model.quantization nf4, but {}", m.tensor_parallel, refusal));
  }
  // On a GPU every model runs as on the CPU: the vocabulary-parallel ops have CUDA kernels,
  // a mixture of experts' routing, permutation and combine are the same ops on every tensor
  // rank, and the tensor group is an NCCL communicator (make_nccl_process_groups; See Note
  // [Tensor-parallel collectives on a GPU] in fsdp/tensor_group.h).
  return m;
}

DataSources make_data_sources(const config::Config& cfg, int64_t vocab, const dist::ProcessGroups& groups) {
  const dist::Communicator& world = *groups.world;
  const int64_t T = cfg.train.seq_len;
  data::LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch_size;
  lo.seq_len = T;
  lo.accum = cfg.train.grad_accum_steps;
  // The data-parallel rank: the ranks of a tensor group read the same micro-batches.
  lo.rank = groups.mesh.data_parallel_rank(world.rank());
  lo.world = groups.mesh.data_parallel_size();
  lo.seed = uint64_t(cfg.data.seed);
  lo.num_workers = cfg.data.num_workers;
  lo.name = "train loader";
  lo.prefetch = cfg.data.prefetch;
  DataSources d;
  if (cfg.data.source == config::DataSource::Synthetic) {
    if (cfg.data.document_masking)
      config::fail_key(cfg, "data.document_masking",
                       "is true, but data.source is synthetic: its tokens have no EOS to split documents at; train on "
                       "token shards (data.path) or set data.document_masking: false");
    auto chain = std::make_shared<data::SyntheticSamples>(vocab, T, uint64_t(cfg.data.seed));
    d.train = chain;
    lo.shuffle = false;  // already random; sample i is a pure function of i
    d.val = std::make_shared<OffsetSamples>(chain, kValidationFirstSample, kValidationFirstSample);
  } else {
    if (cfg.data.path.empty()) {
      config::fail_key(cfg, "data.path",
                       "is not set: it names the folder of token shards to train on (from `fsdp_train prepare`); "
                       "data.source: synthetic trains on a synthetic Markov chain instead, for a smoke test");
    }
    check_shards_exist(cfg, "data.path", cfg.data.path);
    if (!cfg.data.val_path.empty()) check_shards_exist(cfg, "data.val_path", cfg.data.val_path);
    check_manifest_vocab(cfg.data.path, vocab);
    data::CorpusOptions co;
    co.rank = world.rank();
    co.world = world.size();
    if (world.rank() == 0) co.note = [](const std::string& text) { spdlog::info("data: {}", text); };
    d.train = data::open_corpus(cfg.data.path, "train", T, vocab, cfg.data.packing, co);
    lo.shuffle = true;
    if (cfg.data.document_masking) lo.split_after = document_eos(cfg, vocab);
    const std::string val = cfg.data.val_path.empty() ? cfg.data.path : cfg.data.val_path;
    if (val != cfg.data.path) check_manifest_vocab(val, vocab);
    try {
      d.val = data::open_corpus(val, cfg.eval.split, T, vocab, cfg.data.packing, co);
    } catch (const Error& e) {
      // Without val shards a run that never evaluates is fine; evaluate() reports val_error.
      // Either way it is the config's (or the corpus's) error, found before any step: exit 2.
      const std::string remedies = fmt::format(
          "prepare the corpus with a validation split (`fsdp_train prepare ... --val-fraction 0.01`, with --overwrite "
          "to replace its --output), point data.val_path at a folder of {}_*.idx shards, or evaluate another split "
          "(eval.split; `fsdp_train eval --split train`)",
          cfg.eval.split);
      d.val_error = fmt::format("{}; evaluation reads the '{}' shards (eval.split): {}", e.what(), cfg.eval.split,
                                remedies);
      if (!cfg.data.val_path.empty()) config::fail_key(cfg, "data.val_path", fmt::format("is '{}': {}", cfg.data.val_path, d.val_error));
      if (cfg.train.eval_every > 0) {
        config::fail_key(cfg, "train.eval_every",
                         fmt::format("is {}, but there is nothing to evaluate on: {}; {}, or set train.eval_every: 0 "
                                     "to train without evaluating",
                                     cfg.train.eval_every, e.what(), remedies));
      }
    }
  }
  d.train_loader = std::make_unique<data::Loader>(d.train, lo);
  if (d.val) {
    data::LoaderOptions vo = lo;
    vo.name = "validation loader";
    vo.accum = 1;
    vo.shuffle = false;  // the same fixed batches at every evaluation
    d.val_loader = std::make_unique<data::Loader>(d.val, vo);
  }
  return d;
}

optim::LrSchedule lr_schedule(const config::Config& cfg) {
  return optim::LrSchedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.max_steps,
                           to_decay(cfg.optim.schedule)};
}

optim::AdamWConfig adamw_config(const config::Config& cfg) {
  return optim::AdamWConfig{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
}

void init_parameters(const config::Config& cfg, const model::LlamaConfig& model,
                     const std::vector<model::UnitLayout>& units, FsdpEngine& engine) {
  if (!cfg.model.init_from.empty()) {
    const ckpt::SafetensorsFolder folder(cfg.model.init_from);
    ckpt::check_unused_tensors(folder, model);
    engine.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      ckpt::load_hf_unit(folder, units[size_t(u)], shard, begin);
    });
  } else {
    engine.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      model::init_unit(units[size_t(u)], u, uint64_t(cfg.train.seed), cfg.model.init_std, shard, begin);
    });
  }
}

}  // namespace fsdp::train
