#include "fsdp/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ops/elementwise.h"

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

// Validation samples come from the same chain as training (same seed) but from sample
// indices no training step reaches.
constexpr int64_t kValidationFirstSample = int64_t(1) << 60;

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

FsdpOptions fsdp_options(const config::Config& cfg) {
  FsdpOptions o;
  o.strategy = cfg.fsdp.sharding_strategy;
  o.param_dtype = cfg.fsdp.param_dtype;
  o.reduce_dtype = cfg.fsdp.reduce_dtype;
  o.prefetch_limit = cfg.fsdp.prefetch_limit;
  return o;
}

Trainer::Trainer(const config::Config& cfg, dist::ProcessGroups& groups)
    : cfg_(cfg),
      groups_(groups),
      model_(checked_model_config(cfg), cfg.train.dtype),
      engine_(model_.units(), groups, fsdp_options(cfg)),
      act_(model_.config(), cfg.train.micro_batch_size, cfg.train.seq_len, cfg.train.dtype, Device::cpu()),
      train_data_(model_.config().vocab_size, cfg.train.seq_len, uint64_t(cfg.data.seed)),
      val_data_(model_.config().vocab_size, cfg.train.seq_len, uint64_t(cfg.data.seed)) {
  FSDP_CHECK(cfg.train.dtype == DType::F32,
             "train.dtype {} is not available on the CPU backend (float32 compute; use fsdp.param_dtype: bfloat16 "
             "for bf16 parameters)",
             dtype_name(cfg.train.dtype));
  FSDP_CHECK(cfg.data.source == config::DataSource::Synthetic,
             "data.source 'shards' is not available yet: use data.source: synthetic");
  const auto& units = model_.units();
  // Each rank fills only its own shards, straight from the seeded generator or the files.
  if (!cfg.model.init_from.empty()) {
    const ckpt::SafetensorsFolder folder(cfg.model.init_from);
    engine_.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      ckpt::load_hf_unit(folder, units[u], shard, begin);
    });
  } else {
    engine_.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      model::init_unit(units[u], u, uint64_t(cfg.train.seed), cfg.model.init_std, shard, begin);
    });
  }
  schedule_ = optim::LrSchedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.max_steps,
                                to_decay(cfg.optim.schedule)};
  adamw_ = optim::AdamWConfig{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  flops_per_token_ = model_.config().train_flops_per_token(cfg.train.seq_len);
  loss_buf_ = Tensor::zeros({2}, DType::F64);
}

void Trainer::load_micro_batch(int64_t first_sample, bool validation) {
  const data::SyntheticSource& src = validation ? val_data_ : train_data_;
  src.fill(first_sample, act_.batch, act_.ids, act_.targets);
}

uint64_t Trainer::comm_bytes() const {
  // The shard and replicate groups carry the FSDP traffic; world carries the loss.
  return groups_.world->stats().bytes_sent + groups_.shard->stats().bytes_sent +
         groups_.replicate->stats().bytes_sent;
}

double Trainer::comm_wait_seconds() const {
  return groups_.world->stats().wait_seconds + groups_.shard->stats().wait_seconds +
         groups_.replicate->stats().wait_seconds;
}

model::LossSum Trainer::all_reduce_loss(model::LossSum local) {
  double* b = loss_buf_.data<double>();
  b[0] = local.sum;
  b[1] = double(local.tokens);
  groups_.world->wait(groups_.world->all_reduce(loss_buf_));
  return model::LossSum{b[0], int64_t(b[1])};
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  Allocator& host = allocator_for(Device::cpu());
  host.reset_peak();
  const uint64_t bytes0 = comm_bytes();
  const double wait0 = comm_wait_seconds();
  const int world = groups_.world->size(), rank = groups_.world->rank();
  const int64_t micro = cfg_.train.micro_batch_size, accum = cfg_.train.grad_accum_steps;
  const int64_t global_batch = micro * accum * world;
  ++step_;

  // Every target of a synthetic sample is a real token, so the global batch holds
  // global_batch * seq_len targets.
  const int64_t step_tokens = global_batch * cfg_.train.seq_len;
  const double grad_scale = 1.0 / double(step_tokens);
  engine_.begin_step(int(accum));
  model::LossSum local;
  for (int64_t a = 0; a < accum; ++a) {
    engine_.begin_micro_batch(int(a));
    load_micro_batch((step_ - 1) * global_batch + (a * world + rank) * micro, /*validation=*/false);
    const model::LossSum l = model_.forward_backward(act_, engine_, grad_scale);
    local.sum += l.sum;
    local.tokens += l.tokens;
  }
  const model::LossSum total = all_reduce_loss(local);
  const double loss = total.sum / double(total.tokens);
  FSDP_CHECK(std::isfinite(loss), "loss is {} at step {}: stopping (lower optim.lr or check the data)", loss, step_);

  const double grad_norm = engine_.grad_norm();
  const double clip = optim::clip_factor(grad_norm, cfg_.train.grad_clip);
  const double lr = schedule_.at(step_);
  engine_.optimizer_step(adamw_, lr, step_, clip);
  tokens_seen_ += step_tokens;

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
  m.tokens = step_tokens;
  m.tokens_seen = tokens_seen_;
  m.peak_tensor_bytes = host.stats().peak_bytes;
  m.comm_bytes = comm_bytes() - bytes0;
  m.comm_wait_ms = (comm_wait_seconds() - wait0) * 1e3;
  m.world_size = world;
  return m;
}

double Trainer::evaluate(int batches) {
  FSDP_CHECK(batches >= 1, "eval.batches must be >= 1, got {}", batches);
  const int world = groups_.world->size(), rank = groups_.world->rank();
  model::LossSum local;
  for (int b = 0; b < batches; ++b) {
    load_micro_batch(kValidationFirstSample + (int64_t(b) * world + rank) * act_.batch, /*validation=*/true);
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
    metrics = std::make_unique<MetricsWriter>((std::filesystem::path(cfg_.run.dir) / "metrics.jsonl").string(),
                                              /*truncate=*/true);
  }
  spdlog::info("model: {}", model_.config().summary());
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
  }
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
  }
  spdlog::info("done: {} steps, {} tokens", step_, tokens_seen_);
  return 0;
}

}  // namespace fsdp::train
