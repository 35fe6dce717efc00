#include "fsdp/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/model/param_init.h"
#include "fsdp/data/prepare.h"
#include "fsdp/data/synthetic.h"
#include "fsdp/data/synthetic_samples.h"
#include "fsdp/ops/elementwise.h"
#include "fsdp/train/device_peak.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/preemption.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif
#if defined(FSDP_WITH_NCCL)
#include "fsdp/dist/nccl.h"
#endif

namespace fsdp::train {

namespace {

uint64_t max_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

optim::LrDecay to_decay(config::LrSchedule s) {
  switch (s) {
    case config::LrSchedule::Cosine: return optim::LrDecay::Cosine;
    case config::LrSchedule::Linear: return optim::LrDecay::Linear;
    case config::LrSchedule::Constant: return optim::LrDecay::Constant;
  }
  return optim::LrDecay::Cosine;
}

model::LlamaConfig checked_model_config(const config::Config& cfg) {
  model::LlamaConfig m = resolve_model_config(cfg.model);
  FSDP_CHECK(cfg.train.seq_len <= m.max_seq_len, "train.seq_len {} exceeds the model's max_seq_len {}",
             cfg.train.seq_len, m.max_seq_len);
  return m;
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
  FSDP_CHECK(*m->vocab_size == model_vocab,
             "{}: the tokenizer's vocab_size {} differs from model.vocab_size {} (prepare the data with the model's "
             "tokenizer, or set model.vocab_size)",
             (std::filesystem::path(dir) / "manifest.json").string(), *m->vocab_size, model_vocab);
}

}  // namespace

model::LlamaConfig resolve_model_config(const config::ModelConfig& m) {
  const bool from_hf = !m.init_from.empty();
  model::LlamaConfig c = from_hf ? ckpt::read_hf_llama_config(m.init_from) : model::llama_preset(m.preset);
  auto apply = [&](const auto& opt, auto& field, const char* key) {
    if (!opt) return;
    if (from_hf) {
      FSDP_CHECK(double(*opt) == double(field), "model.{} = {} contradicts {}/config.json, which has {}", key, *opt,
                 m.init_from, field);
    }
    field = *opt;
  };
  apply(m.vocab_size, c.vocab_size, "vocab_size");
  apply(m.hidden_size, c.hidden_size, "hidden_size");
  apply(m.intermediate_size, c.intermediate_size, "intermediate_size");
  apply(m.num_layers, c.num_layers, "num_layers");
  apply(m.num_heads, c.num_heads, "num_heads");
  apply(m.num_kv_heads, c.num_kv_heads, "num_kv_heads");
  if (m.max_seq_len) c.max_seq_len = *m.max_seq_len;  // a shorter context is fine for a fine-tune
  apply(m.rope_theta, c.rope_theta, "rope_theta");
  apply(m.norm_eps, c.norm_eps, "norm_eps");
  c.validate();
  return c;
}

FsdpOptions fsdp_options(const config::Config& cfg, Device device) {
  FsdpOptions o;
  o.strategy = cfg.fsdp.sharding_strategy;
  o.param_dtype = cfg.fsdp.param_dtype;
  o.reduce_dtype = cfg.fsdp.reduce_dtype;
  o.prefetch_limit = cfg.fsdp.prefetch_limit;
  o.device = device;
  o.compute_dtype = cfg.train.dtype;
  return o;
}

Device resolve_device(const config::Config& cfg, const dist::WorldInfo& world) {
  const std::string& want = cfg.train.device;
  Device d = Device::cpu();
#if defined(FSDP_WITH_CUDA)
  const int visible = cuda::device_count();
  const bool use_cuda = want == "cuda" || (want == "auto" && cuda::real_gpu_visible());
  if (use_cuda) {
    FSDP_CHECK(visible > 0,
               "train.device is cuda but rank {} on {} sees no CUDA device (CUDA_VISIBLE_DEVICES='{}'); set "
               "train.device: cpu, or run where the GPUs are",
               world.rank, world.hostname, std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
    const int index = visible == 1 ? 0 : world.local_rank;
    FSDP_CHECK(index < visible,
               "train.device is cuda: rank {} is local rank {} of {} on {} but only {} GPU(s) are visible; one rank "
               "per GPU (srun --ntasks-per-node={})",
               world.rank, world.local_rank, world.local_size, world.hostname, visible, visible);
    d = Device::cuda(index);
  }
#else
  FSDP_CHECK(want != "cuda",
             "train.device is cuda but this fsdp_train was built without the CUDA backend (rebuild where nvcc is "
             "found: scripts/build.sh -DFSDP_CUDA=ON), or set train.device: cpu");
  (void)world;
#endif
  FSDP_CHECK(!d.is_cpu() || cfg.train.dtype == DType::F32,
             "train.dtype {} needs train.device cuda; the CPU backend computes in float32 (fsdp.param_dtype: "
             "bfloat16 still halves the all-gathers)",
             dtype_name(cfg.train.dtype));
  return d;
}

namespace {

// The engine's groups: on a GPU the shard and replicate groups carry CUDA tensors (NCCL).
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

}  // namespace

Trainer::Trainer(const config::Config& cfg, dist::ProcessGroups& groups)
    : cfg_(cfg),
      groups_(groups),
      device_(resolve_device(cfg, groups.world_info)),
      engine_groups_(engine_groups(groups, device_)),
      model_(checked_model_config(cfg), cfg.train.dtype, device_),
      engine_(model_.units(), engine_groups_, fsdp_options(cfg, device_)),
      act_(model_.config(), cfg.train.micro_batch_size, cfg.train.seq_len, cfg.train.dtype, device_),
      loss_buf_(Tensor::zeros({4}, DType::F64)) {
  if (cfg.train.dtype == DType::F16) scaler_ = optim::DynamicLossScaler(cfg.train.fp16_init_scale, cfg.train.fp16_growth_interval);
#if defined(FSDP_WITH_CUDA)
  if (device_.is_cuda()) {
    cuda::set_tf32(cfg.train.tf32);
    // One staging row per micro-batch of a step (Trainer::load_micro_batch), and the step's
    // per-token losses gathered on the device for one read-back.
    const int64_t n = int64_t(cfg.train.micro_batch_size) * cfg.train.seq_len, accum = cfg.train.grad_accum_steps;
    ids_host_ = cuda::pinned_empty({accum, n}, DType::I32);
    targets_host_ = cuda::pinned_empty({accum, n}, DType::I32);
    step_losses_ = Tensor::empty({accum, n}, act_.losses.dtype(), device_);
    peak_flops_ = peak_bf16_flops(cuda::device_name(device_.index));
  }
#endif
  const int64_t vocab = model_.config().vocab_size, T = cfg.train.seq_len;
  const int world = groups.world->size();
  data::LoaderOptions lo;
  lo.micro_batch = cfg.train.micro_batch_size;
  lo.seq_len = T;
  lo.accum = cfg.train.grad_accum_steps;
  lo.rank = groups.world->rank();
  lo.world = world;
  lo.seed = uint64_t(cfg.data.seed);
  lo.num_workers = cfg.data.num_workers;
  lo.prefetch = cfg.data.prefetch;
  if (cfg.data.source == config::DataSource::Synthetic) {
    auto chain = std::make_shared<data::SyntheticSamples>(vocab, T, uint64_t(cfg.data.seed));
    train_source_ = chain;
    lo.shuffle = false;  // already random; sample i is a pure function of i
    val_source_ = std::make_shared<OffsetSamples>(chain, kValidationFirstSample, kValidationFirstSample);
  } else {
    check_manifest_vocab(cfg.data.path, vocab);
    train_source_ = data::open_token_corpus(cfg.data.path, "train", T, vocab);
    lo.shuffle = true;
    const std::string val = cfg.data.val_path.empty() ? cfg.data.path : cfg.data.val_path;
    if (val != cfg.data.path) check_manifest_vocab(val, vocab);
    try {
      val_source_ = data::open_token_corpus(val, "val", T, vocab);
    } catch (const Error&) {
      // Without val shards a run that never evaluates is fine; evaluate() says what is missing.
      if (cfg.train.eval_every > 0 || !cfg.data.val_path.empty()) throw;
    }
  }
  train_loader_ = std::make_unique<data::Loader>(train_source_, lo);
  if (val_source_) {
    data::LoaderOptions vo = lo;
    vo.accum = 1;
    vo.shuffle = false;  // the same fixed batches at every evaluation
    val_loader_ = std::make_unique<data::Loader>(val_source_, vo);
  }
  const auto& units = model_.units();
  schedule_ = optim::LrSchedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.max_steps,
                                to_decay(cfg.optim.schedule)};
  adamw_ = optim::AdamWConfig{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  flops_per_token_ = model_.config().train_flops_per_token(cfg.train.seq_len);
  writer_ = std::make_unique<ckpt::CheckpointWriter>(
      groups, ckpt::WriterOptions{config::checkpoint_dir(cfg), cfg.checkpoint.keep_last, cfg.checkpoint.async});
  // Each rank fills only its own shards: from a checkpoint, the files or the seeded generator.
  if (const std::string path = resume_path(); !path.empty()) {
    resume(path);
  } else if (!cfg.model.init_from.empty()) {
    const ckpt::SafetensorsFolder folder(cfg.model.init_from);
    engine_.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      ckpt::load_hf_unit(folder, units[u], shard, begin);
    });
  } else {
    engine_.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      model::init_unit(units[u], u, uint64_t(cfg.train.seed), cfg.model.init_std, shard, begin);
    });
  }
}

std::string Trainer::resume_path() {
  const std::string& r = cfg_.checkpoint.resume;
  if (r == "none") return "";
  if (r != "auto") {
    FSDP_CHECK(ckpt::is_checkpoint_dir(r), "checkpoint.resume: {} is not an fsdp_train checkpoint (no {}/manifest.json)",
               r, r);
    ckpt::verify_checkpoint(r, *groups_.world);
    return r;
  }
  const std::string dir = cfg_.checkpoint.load_dir.empty() ? config::checkpoint_dir(cfg_) : cfg_.checkpoint.load_dir;
  const std::string found = ckpt::find_latest_checkpoint(dir, *groups_.world);
  if (found.empty()) spdlog::info("checkpoint: none in {}: starting from step 0", dir);
  return found;
}

void Trainer::resume(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const ckpt::CheckpointReader reader(path);
  reader.check_model(model_.config(), model_.units());
  const ckpt::Manifest& m = reader.manifest();
  uint64_t bytes = 0;
  Tensor staging;  // shards on a GPU are read into host memory, then uploaded
  for (int u = 0; u < engine_.num_units(); ++u) {
    const int64_t begin = engine_.shard_range(u).begin;
    for (const auto& [kind, dst] : {std::pair<const char*, const Tensor&>{"master", engine_.master(u)},
                                    {"exp_avg", engine_.exp_avg(u)}, {"exp_avg_sq", engine_.exp_avg_sq(u)}}) {
      if (dst.device().is_cpu()) {
        reader.read(u, kind, begin, dst);
      } else {
        if (!staging.defined() || staging.numel() < dst.numel()) staging = Tensor::empty({dst.numel()}, DType::F32);
        const Tensor host = staging.narrow(0, 0, dst.numel());
        reader.read(u, kind, begin, host);
        dst.copy_(host);
      }
      bytes += dst.nbytes();
    }
  }
  scaler_.restore(m.state.loss_scale, m.state.loss_scale_good_steps, m.state.skipped_steps);
  step_ = m.state.step;
  tokens_seen_ = m.state.tokens_seen;
  samples_seen_ = m.state.samples_seen;
  last_saved_step_ = step_;
  train_loader_->seek_global(samples_seen_);
  resumed_from_ = path;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("checkpoint: resumed from {} at step {} ({} tokens seen; saved by {} rank(s) with {}); loaded {:.1f} MiB "
               "on this rank in {:.2f} s",
               path, step_, tokens_seen_, m.world_size, m.strategy, double(bytes) / (1 << 20), secs);
  if (m.state.data_seed != uint64_t(cfg_.data.seed)) {
    spdlog::warn("checkpoint: data.seed {} differs from the checkpoint's {}: the data order from here on is not the "
                 "original run's",
                 cfg_.data.seed, m.state.data_seed);
  }
  if (step_ >= cfg_.train.max_steps) {
    spdlog::warn("checkpoint: {} is at step {}, train.max_steps is {}: nothing to train (raise train.max_steps to "
                 "train on, or set checkpoint.resume: none to start over)",
                 path, step_, cfg_.train.max_steps);
  }
}

ckpt::SaveStats Trainer::save_checkpoint() {
  ckpt::CheckpointMeta meta;
  meta.state = ckpt::TrainState{step_, tokens_seen_, samples_seen_, uint64_t(cfg_.train.seed), uint64_t(cfg_.data.seed)};
  if (scaler_.enabled()) {
    meta.state.loss_scale = scaler_.scale();
    meta.state.loss_scale_good_steps = scaler_.good_steps();
    meta.state.skipped_steps = scaler_.skipped_steps();
  }
  meta.model = model_.config();
  meta.units = model_.units();
  meta.strategy = std::string(config::to_string(cfg_.fsdp.sharding_strategy));
  meta.shard_group_size = groups_.shard->size();
  meta.config_yaml = config::dump_yaml(cfg_);
  std::vector<ckpt::UnitShard> shards(size_t(engine_.num_units()));
  for (int u = 0; u < engine_.num_units(); ++u) {
    shards[size_t(u)] = ckpt::UnitShard{engine_.shard_range(u).begin, engine_.master(u), engine_.exp_avg(u),
                                        engine_.exp_avg_sq(u)};
  }
  last_saved_step_ = step_;
  ckpt::SaveStats s;
  try {
    s = writer_->save(meta, shards);
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    spdlog::error("{} (checkpoint.stop_on_error is false: training goes on)", e.what());
    return s;
  }
  log_save(s, !cfg_.checkpoint.async);
  return s;
}

void Trainer::finish_checkpoint() {
  if (!writer_->pending()) return;
  try {
    writer_->finish();
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    spdlog::error("{} (checkpoint.stop_on_error is false: training goes on)", e.what());
  }
}

void Trainer::maybe_commit_checkpoint() {
  if (!writer_->pending() || busy_writers_ != 0) return;
  try {
    log_save(writer_->commit(), true);
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    spdlog::error("{} (checkpoint.stop_on_error is false: training goes on)", e.what());
  }
}

void Trainer::log_save(const ckpt::SaveStats& s, bool committed) const {
  if (!committed) {
    spdlog::info("checkpoint: step {} snapshot taken, the step loop stalled {:.0f} ms; writing in the background",
                 s.step, s.stall_seconds * 1e3);
    return;
  }
  const double gbps = s.write_seconds > 0 ? double(s.bytes) / s.write_seconds / 1e9 : 0.0;
  if (cfg_.checkpoint.async) {
    spdlog::info("checkpoint: saved {} ({:.1f} MiB written by this rank in {:.2f} s in the background, {:.2f} GB/s)",
                 s.path, double(s.bytes) / (1 << 20), s.write_seconds, gbps);
  } else {
    spdlog::info("checkpoint: saved {} ({:.1f} MiB written by this rank in {:.2f} s, {:.2f} GB/s; the step loop "
                 "stalled {:.0f} ms)",
                 s.path, double(s.bytes) / (1 << 20), s.write_seconds, gbps, s.stall_seconds * 1e3);
  }
}

uint64_t Trainer::comm_bytes() const {
  // The engine's shard and replicate groups carry the FSDP traffic; world carries the loss.
  return groups_.world->stats().bytes_sent + engine_groups_.shard->stats().bytes_sent +
         engine_groups_.replicate->stats().bytes_sent;
}

double Trainer::comm_wait_seconds() const {
  return groups_.world->stats().wait_seconds + engine_groups_.shard->stats().wait_seconds +
         engine_groups_.replicate->stats().wait_seconds;
}

void Trainer::log_device() const {
  const std::string dtype = dtype_name(cfg_.train.dtype);
  if (device_.is_cpu()) {
    spdlog::info("device: cpu, {} compute", dtype);
    return;
  }
#if defined(FSDP_WITH_CUDA)
  const int i = device_.index;
  spdlog::info("device: one GPU per rank ({} here: {}, {:.0f} GiB{}), {} compute{}{}, collectives over {}", device_.str(),
               cuda::device_name(i), double(cuda::device_memory_bytes(i)) / double(1ull << 30),
               cuda::is_emulated() ? ", the CPU emulator: no GPU timing" : "", dtype,
               scaler_.enabled() ? fmt::format(" with dynamic loss scaling from {:g}", scaler_.scale()) : "",
               cfg_.train.tf32 ? ", TF32 GEMMs" : "",
               engine_groups_.shard->size() > 1 || engine_groups_.replicate->size() > 1 ? "NCCL" : "none (one rank)");
  if (peak_flops_) {
    spdlog::info("device: MFU is model FLOP/s over {:.0f} TFLOP/s (dense bf16 peak of this GPU; FSDP_PEAK_TFLOPS "
                 "overrides)",
                 *peak_flops_ / 1e12);
  }
#endif
}

// Micro-batch `index` of a step goes through staging row `index`: the upload from it is
// only enqueued here, and the row is refilled one step later, after that step's loss
// read-back has waited for the compute stream (which carries the upload). Evaluation uses
// row 0 and reads its losses back at once.
void Trainer::load_micro_batch(data::Loader& loader, int64_t index) {
  if (device_.is_cpu()) {
    loader.next(act_.ids, act_.targets);
    return;
  }
  const Tensor ids = ids_host_.select(0, index), targets = targets_host_.select(0, index);
  loader.next(ids, targets);
  act_.ids.copy_(ids);
  act_.targets.copy_(targets);
}

model::LossSum Trainer::all_reduce_loss(model::LossSum local) {
  double* b = loss_buf_.data<double>();
  b[0] = local.sum;
  b[1] = double(local.tokens);
  b[2] = preemption_signal() != 0 ? 1.0 : 0.0;
  b[3] = writer_->local_busy() ? 1.0 : 0.0;
  groups_.world->wait(groups_.world->all_reduce(loss_buf_));
  stop_votes_ = int(b[2]);
  busy_writers_ = int(b[3]);
  return model::LossSum{b[0], int64_t(b[1])};
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  Allocator& mem = allocator_for(device_);
  mem.reset_peak();
  const uint64_t bytes0 = comm_bytes();
  const double wait0 = comm_wait_seconds();
  const double data_wait0 = train_loader_->wait_seconds();
  const int world = groups_.world->size();
  const int64_t micro = cfg_.train.micro_batch_size, accum = cfg_.train.grad_accum_steps;
  const int64_t global_batch = micro * accum * world;
  ++step_;

  // Every target of a synthetic sample is a real token, so the global batch holds
  // global_batch * seq_len targets.
  const int64_t step_tokens = global_batch * cfg_.train.seq_len;
  // float16: the backward pass runs on the loss times the loss scale (1 otherwise).
  const double loss_scale = scaler_.scale();
  const double grad_scale = loss_scale / double(step_tokens);
  engine_.begin_step(int(accum));
  model::LossSum local;
  for (int64_t a = 0; a < accum; ++a) {
    engine_.begin_micro_batch(int(a));
    load_micro_batch(*train_loader_, a);
    if (device_.is_cpu()) {
      const model::LossSum l = model_.forward_backward(act_, engine_, grad_scale);
      local.sum += l.sum;
      local.tokens += l.tokens;
    } else {
      // Enqueue only; the losses wait on the device for one read-back after the last.
      model_.enqueue_forward_backward(act_, engine_, grad_scale);
      step_losses_.select(0, a).copy_(act_.losses);
    }
  }
  if (!device_.is_cpu()) {
    const Tensor losses = step_losses_.to(Device::cpu());  // the step's one wait for the loss
    for (int64_t a = 0; a < accum; ++a) {
      const model::LossSum l = model::sum_losses(losses.select(0, a), targets_host_.select(0, a));
      local.sum += l.sum;
      local.tokens += l.tokens;
    }
  }
  const model::LossSum total = all_reduce_loss(local);
  const double loss = total.sum / double(total.tokens);
  FSDP_CHECK(std::isfinite(loss), "loss is {} at step {}: stopping (lower optim.lr or check the data{})", loss, step_,
             cfg_.train.dtype == DType::F16 ? "; float16 activations may overflow: try bfloat16" : "");

  // The norm of the scaled gradients: not finite when float16 overflowed (every rank sees
  // the same all-reduced value, so every rank skips alike).
  const double scaled_norm = engine_.grad_norm();
  const bool apply = scaler_.update(!std::isfinite(scaled_norm));
  const double grad_norm = scaled_norm / loss_scale;
  const double lr = schedule_.at(step_);
  if (apply) {
    const double clip = optim::clip_factor(grad_norm, cfg_.train.grad_clip);
    // AdamW counts only the steps it took (torch.optim skips its step count with the step).
    engine_.optimizer_step(adamw_, lr, step_ - scaler_.skipped_steps(), clip / loss_scale);
  }
  tokens_seen_ += step_tokens;
  samples_seen_ += global_batch;

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  StepMetrics m;
  m.step = step_;
  m.loss = loss;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_ms = secs * 1e3;
  m.samples_per_sec = double(global_batch) / secs;
  m.tokens_per_sec = double(step_tokens) / secs;
  m.gflops_per_sec = flops_per_token_ * double(step_tokens) / secs / 1e9;
  if (peak_flops_) m.mfu = m.gflops_per_sec * 1e9 / double(world) / *peak_flops_;
  if (scaler_.enabled()) m.loss_scale = loss_scale;
  m.skipped = !apply;
  m.tokens = step_tokens;
  m.tokens_seen = tokens_seen_;
  m.peak_tensor_bytes = mem.stats().peak_bytes;
  m.comm_bytes = comm_bytes() - bytes0;
  m.comm_wait_ms = (comm_wait_seconds() - wait0) * 1e3;
  m.world_size = world;
  m.data_wait_ms = (train_loader_->wait_seconds() - data_wait0) * 1e3;
  return m;
}

double Trainer::evaluate(int batches) {
  FSDP_CHECK(batches >= 1, "eval.batches must be >= 1, got {}", batches);
  FSDP_CHECK(val_loader_ != nullptr, "no validation data: set data.val_path, or prepare {} with --val-fraction",
             cfg_.data.path);
  val_loader_->seek(0);
  model::LossSum local;
  for (int b = 0; b < batches; ++b) {
    load_micro_batch(*val_loader_, 0);
    const model::LossSum l = model_.forward(act_, engine_);
    local.sum += l.sum;
    local.tokens += l.tokens;
  }
  const model::LossSum total = all_reduce_loss(local);
  return total.sum / double(total.tokens);
}

int Trainer::run() {
  const auto& t = cfg_.train;
  const bool rank0 = groups_.world->rank() == 0;
  std::unique_ptr<MetricsWriter> metrics;
  if (rank0 && cfg_.logging.metrics) {
    std::filesystem::create_directories(cfg_.run.dir);
    const std::string path = (std::filesystem::path(cfg_.run.dir) / "metrics.jsonl").string();
    // A resumed run continues the file: drop the steps logged after the checkpoint (the
    // killed run's), which are about to be trained again.
    if (!resumed_from_.empty()) truncate_metrics_after(path, step_);
    metrics = std::make_unique<MetricsWriter>(path, /*truncate=*/resumed_from_.empty());
  }
  spdlog::info("model: {}", model_.config().summary());
  log_device();
  const int world = groups_.world->size();
  spdlog::info("batch: {} sequences x {} tokens per micro-batch, {} accumulation steps, {} ranks = {} tokens per step",
               t.micro_batch_size, t.seq_len, t.grad_accum_steps, world,
               int64_t(t.micro_batch_size) * t.grad_accum_steps * world * t.seq_len);
  spdlog::info("fsdp: {} over {} ranks on {} node(s) (shard group {}, replicate group {}), params {} / reduce {}, "
               "{:.1f} MiB of sharded state on this rank",
               config::to_string(cfg_.fsdp.sharding_strategy), world, groups_.world_info.num_nodes,
               groups_.shard->size(), groups_.replicate->size(), dtype_name(cfg_.fsdp.param_dtype),
               dtype_name(cfg_.fsdp.reduce_dtype), double(engine_.persistent_bytes()) / (1 << 20));
  if (cfg_.data.source == config::DataSource::Synthetic) {
    spdlog::info("data: synthetic Markov chain (loss floor {:.3f} nats, uniform guess {:.3f})",
                 data::SyntheticSource::entropy_rate(), std::log(double(model_.config().vocab_size)));
  } else {
    spdlog::info("data: {} ({} windows of {} tokens per epoch, {} per step; validation: {})", cfg_.data.path,
                 train_source_->num_samples(), t.seq_len + 1,
                 int64_t(t.micro_batch_size) * t.grad_accum_steps * world,
                 val_source_ ? std::to_string(val_source_->num_samples()) + " windows" : std::string("none"));
  }
  const int interval = cfg_.checkpoint.interval;
  while (step_ < t.max_steps) {
    StepMetrics m = train_step();
    m.max_rss_bytes = max_rss_bytes();
    if (t.eval_every > 0 && (step_ % t.eval_every == 0 || step_ == t.max_steps)) m.val_loss = evaluate(cfg_.eval.batches);
    // metrics.jsonl gets every step (resume and equivalence checks compare whole loss
    // curves); the console gets one line per log_every steps. Rank 0 speaks for all.
    if (metrics) metrics->write(m);
    if (rank0 && (step_ % t.log_every == 0 || step_ == 1 || step_ == t.max_steps || m.val_loss)) {
      spdlog::info("{}", format_step_line(m, t.max_steps));
    }
    maybe_commit_checkpoint();
    if (stop_votes_ > 0) {
      // Every rank saw the same count in the same all-reduce, so all stop at this step.
      spdlog::warn("preemption signal ({} rank(s)): saving a checkpoint at step {} and exiting with code {} so the "
                   "job can be requeued",
                   stop_votes_, step_, kExitPreempted);
      if (last_saved_step_ != step_) save_checkpoint();
      finish_checkpoint();
      return kExitPreempted;
    }
    if (interval > 0 && step_ % interval == 0 && step_ < t.max_steps) save_checkpoint();
  }
  if (last_saved_step_ != step_) save_checkpoint();
  finish_checkpoint();
  spdlog::info("done: {} steps, {} tokens", step_, tokens_seen_);
  return kExitOk;
}

}  // namespace fsdp::train
