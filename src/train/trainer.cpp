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

LocalParams::LocalParams(const std::vector<model::UnitLayout>& units) {
  for (const auto& u : units) {
    params_.push_back(Tensor::empty({u.numel}, DType::F32));
    grads_.push_back(Tensor::zeros({u.numel}, DType::F32));
    exp_avg_.push_back(Tensor::zeros({u.numel}, DType::F32));
    exp_avg_sq_.push_back(Tensor::zeros({u.numel}, DType::F32));
  }
}

Trainer::Trainer(const config::Config& cfg)
    : cfg_(cfg),
      model_(checked_model_config(cfg), cfg.train.dtype),
      params_(model_.units()),
      act_(model_.config(), cfg.train.micro_batch_size, cfg.train.seq_len, cfg.train.dtype, Device::cpu()),
      train_data_(model_.config().vocab_size, cfg.train.seq_len, uint64_t(cfg.data.seed)),
      val_data_(model_.config().vocab_size, cfg.train.seq_len, uint64_t(cfg.data.seed)) {
  FSDP_CHECK(cfg.train.dtype == DType::F32,
             "train.dtype {} is not available on the CPU backend yet (float32 only)", dtype_name(cfg.train.dtype));
  FSDP_CHECK(cfg.data.source == config::DataSource::Synthetic,
             "data.source 'shards' is not available yet: use data.source: synthetic");
  const auto& units = model_.units();
  if (!cfg.model.init_from.empty()) {
    const ckpt::SafetensorsFolder folder(cfg.model.init_from);
    for (int u = 0; u < int(units.size()); ++u) ckpt::load_hf_unit(folder, units[u], params_.params(u));
  } else {
    for (int u = 0; u < int(units.size()); ++u)
      model::init_unit(units[u], u, uint64_t(cfg.train.seed), cfg.model.init_std, params_.params(u));
  }
  for (const auto& u : units) segments_.push_back(optim::decay_segments(u));
  schedule_ = optim::LrSchedule{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.max_steps,
                                to_decay(cfg.optim.schedule)};
  adamw_ = optim::AdamWConfig{cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay};
  flops_per_token_ = model_.config().train_flops_per_token(cfg.train.seq_len);
}

void Trainer::load_micro_batch(int64_t first_sample, bool validation) {
  const data::SyntheticSource& src = validation ? val_data_ : train_data_;
  src.fill(first_sample, act_.batch, act_.ids, act_.targets);
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  Allocator& host = allocator_for(Device::cpu());
  host.reset_peak();
  const int64_t micro = cfg_.train.micro_batch_size, accum = cfg_.train.grad_accum_steps;
  const int64_t global_batch = micro * accum;
  ++step_;

  for (int u = 0; u < params_.num_units(); ++u) fill_(params_.grads(u), 0.0);

  // Every target of a synthetic sample is a real token, so the global batch holds
  // global_batch * seq_len targets; gradients are scaled by its inverse so that
  // accumulation and (later) data parallelism give the mean over the whole batch.
  const int64_t step_tokens = global_batch * cfg_.train.seq_len;
  const double grad_scale = 1.0 / double(step_tokens);
  double loss_sum = 0;
  int64_t loss_tokens = 0;
  for (int64_t a = 0; a < accum; ++a) {
    load_micro_batch((step_ - 1) * global_batch + a * micro, /*validation=*/false);
    const model::LossSum l = model_.forward_backward(act_, params_, grad_scale);
    loss_sum += l.sum;
    loss_tokens += l.tokens;
  }
  const double loss = loss_sum / double(loss_tokens);
  FSDP_CHECK(std::isfinite(loss), "loss is {} at step {}: stopping (lower optim.lr or check the data)", loss, step_);

  double sq = 0;
  for (int u = 0; u < params_.num_units(); ++u) sq += sum_squares(params_.grads(u));
  const double grad_norm = std::sqrt(sq);
  const double clip = optim::clip_factor(grad_norm, cfg_.train.grad_clip);
  const double lr = schedule_.at(step_);
  for (int u = 0; u < params_.num_units(); ++u) {
    optim::adamw_step_range(segments_[u], 0, params_.params(u), params_.grads(u), params_.exp_avg(u),
                            params_.exp_avg_sq(u), adamw_, lr, step_, clip);
  }
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
  return m;
}

double Trainer::evaluate(int batches) {
  FSDP_CHECK(batches >= 1, "eval.batches must be >= 1, got {}", batches);
  double sum = 0;
  int64_t tokens = 0;
  for (int b = 0; b < batches; ++b) {
    load_micro_batch(kValidationFirstSample + int64_t(b) * act_.batch, /*validation=*/true);
    const model::LossSum l = model_.forward(act_, params_);
    sum += l.sum;
    tokens += l.tokens;
  }
  return sum / double(tokens);
}

int Trainer::run() {
  const auto& t = cfg_.train;
  std::filesystem::create_directories(cfg_.run.dir);
  std::unique_ptr<MetricsWriter> metrics;
  if (cfg_.logging.metrics) {
    metrics = std::make_unique<MetricsWriter>((std::filesystem::path(cfg_.run.dir) / "metrics.jsonl").string(),
                                              /*truncate=*/true);
  }
  spdlog::info("model: {}", model_.config().summary());
  spdlog::info("batch: {} sequences x {} tokens per micro-batch, {} accumulation steps = {} tokens per step",
               t.micro_batch_size, t.seq_len, t.grad_accum_steps,
               int64_t(t.micro_batch_size) * t.grad_accum_steps * t.seq_len);
  if (cfg_.data.source == config::DataSource::Synthetic) {
    spdlog::info("data: synthetic Markov chain (loss floor {:.3f} nats, uniform guess {:.3f})",
                 data::SyntheticSource::entropy_rate(), std::log(double(model_.config().vocab_size)));
  }
  while (step_ < t.max_steps) {
    StepMetrics m = train_step();
    m.max_rss_bytes = max_rss_bytes();
    if (t.eval_every > 0 && (step_ % t.eval_every == 0 || step_ == t.max_steps)) m.val_loss = evaluate(cfg_.eval.batches);
    // metrics.jsonl gets every step (resume and equivalence checks compare whole loss
    // curves); the console gets one line per log_every steps.
    if (metrics) metrics->write(m);
    if (step_ % t.log_every == 0 || step_ == 1 || step_ == t.max_steps || m.val_loss) {
      spdlog::info("{}", format_step_line(m, t.max_steps));
    }
  }
  spdlog::info("done: {} steps, {} tokens", step_, tokens_seen_);
  return 0;
}

}  // namespace fsdp::train
